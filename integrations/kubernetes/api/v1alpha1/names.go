package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// maxNameLength is the longest object name the API server accepts.
const maxNameLength = 253

// GangName names attempt of the job kind/name: "<kind>-<name>-<attempt>",
// kind in lower case ("pytorchjob-train-1"). Names that would be too long
// are cut and end in a hash of the whole, so that they stay unique.
func GangName(kind, name string, attempt int32) string {
	full := strings.ToLower(kind) + "-" + name + "-" + strconv.Itoa(int(attempt))
	if len(full) <= maxNameLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	tail := "-" + hex.EncodeToString(sum[:8])
	head := strings.TrimRight(full[:maxNameLength-len(tail)], "-.")
	return head + tail
}
