package reviewcache

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCacheRemembersUntilExpiry(t *testing.T) {
	c := New[string](10)
	t0 := time.Unix(1000, 0)
	_, ok := c.Get("tok", t0)
	require.False(t, ok)
	c.Put("tok", "alice", t0, time.Minute)
	v, ok := c.Get("tok", t0.Add(59*time.Second))
	require.True(t, ok)
	require.Equal(t, "alice", v)
	_, ok = c.Get("tok", t0.Add(time.Minute))
	require.False(t, ok, "an answer is not used at its expiry")
	_, ok = c.Get("other", t0)
	require.False(t, ok)
}

func TestCacheFullDropsExpiredFirstThenAll(t *testing.T) {
	c := New[int](3)
	t0 := time.Unix(1000, 0)
	c.Put("old", 1, t0, time.Second)
	c.Put("a", 2, t0, time.Hour)
	c.Put("b", 3, t0, time.Hour)
	later := t0.Add(time.Minute)
	c.Put("c", 4, later, time.Hour)
	require.Equal(t, 3, c.Len(), "the expired entry made room")
	for k, want := range map[string]int{"a": 2, "b": 3, "c": 4} {
		v, ok := c.Get(k, later)
		require.True(t, ok, k)
		require.Equal(t, want, v, k)
	}
	c.Put("a", 5, later, time.Hour)
	require.Equal(t, 3, c.Len(), "replacing an entry needs no room")
	c.Put("d", 6, later, time.Hour)
	require.Equal(t, 1, c.Len(), "full of live entries: all go")
	v, ok := c.Get("d", later)
	require.True(t, ok)
	require.Equal(t, 6, v)
}

func TestCacheConcurrentUse(t *testing.T) {
	c := New[int](50)
	now := time.Unix(1000, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := fmt.Sprint(g, "/", i%100)
				c.Put(k, i, now, time.Minute)
				if v, ok := c.Get(k, now); ok {
					require.GreaterOrEqual(t, v, 0)
				}
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, c.Len(), 50)
}
