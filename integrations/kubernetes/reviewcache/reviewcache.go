// Package reviewcache remembers the API server's answers to reviews
// (TokenReview, SubjectAccessReview) for a while, so that a client that
// calls again with the same bearer token is not reviewed again: the gate
// server caches the identities of rank pods and its refusals, the
// controller's metrics endpoint the users of its scrapers and what they
// may read.
//
// Entries are keyed by the SHA-256 of the token or question, never by the
// token itself, and a cache holds a bounded number of them: when it is
// full, expired entries go first, and when none has expired, all go (a
// flood of new tokens then costs reviews, not memory).
//
// k8s.io/apiserver's cached token authenticator does this for the API
// server; it is not used here because it brings 25 packages into the
// binary (OpenTelemetry tracing, audit, component-base metrics registered
// in a global registry): about 1.1 MB of it.
package reviewcache

import (
	"crypto/sha256"
	"sync"
	"time"
)

// Cache maps review questions (a bearer token, a token's user and a
// request) to answers of type V until they expire. It is safe for
// concurrent use.
type Cache[V any] struct {
	max int

	mu      sync.Mutex
	entries map[[sha256.Size]byte]entry[V]
}

type entry[V any] struct {
	v       V
	expires time.Time
}

// New returns a cache of at most size entries (at least 1).
func New[V any](size int) *Cache[V] {
	return &Cache[V]{max: max(1, size), entries: map[[sha256.Size]byte]entry[V]{}}
}

// Get returns the answer remembered for key, if it has not expired at now.
func (c *Cache[V]) Get(key string, now time.Time) (V, bool) {
	k := sha256.Sum256([]byte(key))
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Put remembers v for key until now+ttl.
func (c *Cache[V]) Put(key string, v V, now time.Time, ttl time.Duration) {
	k := sha256.Sum256([]byte(key))
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; !ok && len(c.entries) >= c.max {
		for x, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, x)
			}
		}
		if len(c.entries) >= c.max {
			clear(c.entries)
		}
	}
	c.entries[k] = entry[V]{v: v, expires: now.Add(ttl)}
}

// Len is the number of entries held, expired ones included.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
