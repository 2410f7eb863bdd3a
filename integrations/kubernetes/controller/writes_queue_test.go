package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
)

// clockQueue is a writeQueue with the semantics of controller-runtime's
// priority queue (one entry per item, the highest priority and earliest
// time asked for; an item added while a worker has it comes back after
// Done; the most urgent ready item first, in order of adding within a
// priority) whose delays follow a fake clock, so that the writes'
// deadlines, delays and retries are unit-tested without waiting.
type clockQueue struct {
	clk clock.WithDelayedExecution

	mu    sync.Mutex
	wake  chan struct{}
	items map[types.UID]*cqItem // queued
	busy  map[types.UID]bool    // with a worker
	again map[types.UID]*cqItem // added while with a worker
	fails map[types.UID]int
	seq   int
	shut  bool
}

type cqItem struct {
	prio    int
	readyAt time.Time
	seq     int
}

func newClockQueue(clk clock.WithDelayedExecution) *clockQueue {
	return &clockQueue{clk: clk, wake: make(chan struct{}), items: map[types.UID]*cqItem{}, busy: map[types.UID]bool{},
		again: map[types.UID]*cqItem{}, fails: map[types.UID]int{}}
}

// broadcast wakes every waiting Get (called by the fake clock's timers,
// which hold the clock's lock: it never reads the clock).
func (q *clockQueue) broadcast() {
	q.mu.Lock()
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
}

func (q *clockQueue) AddWithOpts(o priorityqueue.AddOpts, items ...types.UID) {
	now := q.clk.Now()
	for _, uid := range items {
		after := o.After
		if o.RateLimited {
			q.mu.Lock()
			n := q.fails[uid]
			q.fails[uid] = n + 1
			q.mu.Unlock()
			after = min(200*time.Millisecond<<n, 30*time.Second)
		}
		prio := 0
		if o.Priority != nil {
			prio = *o.Priority
		}
		q.mu.Lock()
		set := q.items
		if q.busy[uid] {
			set = q.again
		}
		it := set[uid]
		if it == nil {
			q.seq++
			it = &cqItem{prio: prio, readyAt: now.Add(after), seq: q.seq}
			set[uid] = it
		} else {
			if prio > it.prio {
				q.seq++
				it.prio, it.seq = prio, q.seq
			}
			if r := now.Add(after); r.Before(it.readyAt) {
				it.readyAt = r
			}
		}
		q.mu.Unlock()
		if after > 0 {
			q.clk.AfterFunc(after, q.broadcast)
		} else {
			q.broadcast()
		}
	}
}

func (q *clockQueue) GetWithPriority() (types.UID, int, bool) {
	for {
		now := q.clk.Now()
		q.mu.Lock()
		if q.shut {
			q.mu.Unlock()
			return "", 0, true
		}
		var best types.UID
		var bi *cqItem
		for uid, it := range q.items {
			if it.readyAt.After(now) {
				continue
			}
			if bi == nil || it.prio > bi.prio || (it.prio == bi.prio && it.seq < bi.seq) {
				best, bi = uid, it
			}
		}
		if bi != nil {
			delete(q.items, best)
			q.busy[best] = true
			q.mu.Unlock()
			return best, bi.prio, false
		}
		ch := q.wake
		q.mu.Unlock()
		<-ch
	}
}

func (q *clockQueue) Done(uid types.UID) {
	q.mu.Lock()
	delete(q.busy, uid)
	if it := q.again[uid]; it != nil {
		delete(q.again, uid)
		if cur := q.items[uid]; cur == nil || it.readyAt.Before(cur.readyAt) {
			q.items[uid] = it
		}
	}
	q.mu.Unlock()
	q.broadcast()
}

func (q *clockQueue) Forget(uid types.UID) {
	q.mu.Lock()
	delete(q.fails, uid)
	q.mu.Unlock()
}

func (q *clockQueue) ShutDown() {
	q.mu.Lock()
	q.shut = true
	q.mu.Unlock()
	q.broadcast()
}
