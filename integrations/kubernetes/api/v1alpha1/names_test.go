package v1alpha1

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestGangName(t *testing.T) {
	assert.Equal(t, "pytorchjob-train-1", GangName("PyTorchJob", "train", 1))
	assert.Equal(t, "mpijob-train-12", GangName("MPIJob", "train", 12))

	long := strings.Repeat("a", 250)
	n1, n2 := GangName("PyTorchJob", long, 1), GangName("PyTorchJob", long, 2)
	assert.LessOrEqual(t, len(n1), 253)
	assert.NotEqual(t, n1, n2, "cut names stay unique")
	assert.Empty(t, validation.IsDNS1123Subdomain(n1))
	// A cut that lands on a dot or dash still gives a valid name.
	dotted := strings.Repeat("a.", 126)
	assert.Empty(t, validation.IsDNS1123Subdomain(GangName("MPIJob", dotted, 3)))
}
