// Package apicalls is how the controller's parts call the API server
// where the caches are not enough: a read that must see an object at
// least as new as the caller knows of, and the backoff of a write that
// must eventually succeed.
package apicalls

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// RetryBackoff spaces the retries of a write that must eventually succeed:
// first, doubling on each failure, at most limit. Steps only bounds the
// doubling; the retry loops end with their context.
func RetryBackoff(first, limit time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: first, Factor: 2, Steps: math.MaxInt32, Cap: limit}
}
