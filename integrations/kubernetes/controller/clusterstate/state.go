package clusterstate

import (
	"context"
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/rankgate/rankgate/preflight/schedule"
)

// LiveFresh: judgements this close share one live snapshot even when pods
// changed in between.
const LiveFresh = time.Second

// syncWait bounds how long Live waits for the informers' initial lists.
const syncWait = time.Minute

// State is the cluster on one replica: the nodes, the pods' usage, and
// the live snapshot that joins them.
type State struct {
	Nodes *Nodes
	Usage *Usage
	clk   clock.Clock

	// mu serialises Live; live is its last result.
	mu   sync.Mutex
	live *Live
}

// New is an empty state of engine e, on clk.
func New(e *schedule.Engine, clk clock.Clock) *State {
	return &State{Nodes: NewNodes(e), Usage: NewUsage(), clk: clk}
}

// Live is the node model with every bound pod's usage, as a full read
// would give it.
type Live struct {
	// Cluster is the snapshot; read it only.
	Cluster *schedule.Cluster
	// Seq numbers the snapshots: equal Seq, equal snapshot.
	Seq       uint64
	gen, ugen uint64 // of the model and of the usage
	at        time.Time
}

// Live is the current live snapshot. It is laid out again after a node
// change, and after a pod change once it is LiveFresh old; until then
// every judgement shares it. It waits (at most a minute, and while ctx
// lives) for the informers' initial lists.
func (s *State) Live(ctx context.Context) (*Live, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	deadline := s.clk.Now().Add(syncWait)
	for {
		base, gen, err := s.Nodes.Cluster()
		var ugen uint64
		if err == nil {
			ugen, err = s.Usage.Generation()
		}
		if err == nil {
			if l := s.live; l != nil && l.gen == gen && (l.ugen == ugen || s.clk.Since(l.at) < LiveFresh) {
				return l, nil
			}
			used, ugen, err := s.Usage.Used()
			if err != nil {
				return nil, err
			}
			seq := uint64(1)
			if s.live != nil {
				seq = s.live.Seq + 1
			}
			s.live = &Live{Cluster: base.WithUsed(used), Seq: seq, gen: gen, ugen: ugen, at: s.clk.Now()}
			return s.live, nil
		}
		if !errors.Is(err, ErrNodesNotSynced) && !errors.Is(err, ErrUsageNotSynced) || s.clk.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-s.clk.After(100 * time.Millisecond):
		}
	}
}
