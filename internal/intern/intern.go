// Package intern keeps one read-only copy of equal values, so that many
// objects held in memory (informer caches) share what they have in
// common. Entries are weak: a value that nothing holds any more is
// collected.
package intern

import (
	"encoding/json"
	"sync"
	"weak"
)

// Table holds one copy per key. The zero Table is ready to use; a Table
// must not be copied after first use.
type Table[T any] struct {
	mu    sync.Mutex
	m     map[string]weak.Pointer[T]
	sweep int
}

// Share returns the copy held for key, or v, which becomes that copy.
func (s *Table[T]) Share(key string, v *T) *T {
	return s.ShareFunc(key, func() *T { return v })
}

// ShareFunc returns the copy held for key, or makes it (only then).
func (s *Table[T]) ShareFunc(key string, build func() *T) *T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.m[key].Value(); p != nil {
		return p
	}
	v := build()
	if s.m == nil {
		s.m = map[string]weak.Pointer[T]{}
	}
	s.m[key] = weak.Make(v)
	if len(s.m) > s.sweep {
		for k, p := range s.m {
			if p.Value() == nil {
				delete(s.m, k)
			}
		}
		s.sweep = 2*len(s.m) + 64
	}
	return v
}

// ShareJSON shares v under its JSON encoding; v itself when it has none.
func ShareJSON[T any](table *Table[T], v *T) *T {
	key, err := json.Marshal(v)
	if err != nil {
		return v
	}
	return table.Share(string(key), v)
}
