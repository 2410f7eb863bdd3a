package leader

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rankgate/rankgate/integrations/kubeflow"
	"github.com/rankgate/rankgate/integrations/kubernetes/api/v1alpha1"
	"github.com/rankgate/rankgate/integrations/kubernetes/contract"
	"github.com/rankgate/rankgate/integrations/kubernetes/controller/decision"
	"github.com/rankgate/rankgate/integrations/kubernetes/devicesource"
	"github.com/rankgate/rankgate/integrations/kubernetes/gangstore"
	"github.com/rankgate/rankgate/preflight"
	"github.com/rankgate/rankgate/topology"
	"github.com/rankgate/rankgate/verdict"
)

// The Gang resource (rankgate.io/v1alpha1, api/v1alpha1): one per gated
// job attempt, in the job's namespace, named GangName(kind, job, attempt)
// and owned by the job (the garbage collector deletes it with the job).
// While the gang is open its status shows the ranks that reported; the
// verdict is recorded in its status before any rank hears it (record.go).
//
// The controller keeps no informer on Gangs (finished ones are history and
// may be many): it reads them from the API server, and remembers the ones
// of the jobs it is gating (GangRecord).

// GangRecord is the Gang resource of one job attempt, as this replica knows it.
type GangRecord struct {
	t          target
	apiVersion string
	expected   int32
	timeout    time.Duration

	mu      sync.Mutex
	obj     *v1alpha1.Gang // as last read or written (nil: not yet)
	waiting string         // what the Pending watchdog says the job waits for
	// The writes' state (writes.go): recorded is the verdict recorded in
	// the Gang (by this replica or an earlier leader); onJobAt when the job
	// was found carrying it (zero: not yet applied); dirty says progress
	// is to be written, progressAt when it last was.
	ask        *decision.Ask // a decision asked for, until it is made
	restart    int32         // a later restart a rank reported from (restart.go)
	recorded   *decision.Decision
	onJobAt    time.Time
	dirty      bool
	progressAt time.Time
	// The job's other writes (jobwrites.go): waitingDue asks to write
	// waiting (the annotation; "" removes it) with waitingCause's Event;
	// regate asks to re-gate the job a person resumed after a fail.
	waitingDue   bool
	waitingCause *verdict.Finding
	regate       bool
}

// unapplied is r's recorded verdict while its job does not carry it yet
// (nil once it does), and r's target.
func (r *GangRecord) unapplied() (*decision.Decision, target) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recorded != nil && r.onJobAt.IsZero() {
		return r.recorded, r.t
	}
	return nil, r.t
}

func (r *GangRecord) set(obj *v1alpha1.Gang) {
	r.mu.Lock()
	r.obj = obj.DeepCopy()
	// Not kept, not sent back: an update without managed fields keeps the
	// server's, and the API server decodes less.
	r.obj.ManagedFields = nil
	r.mu.Unlock()
}

// decidedLocked: r's verdict is recorded, as this replica knows (recorded)
// or as the Gang last read says (another replica recorded it): no more
// progress writes. r.mu held.
func (r *GangRecord) decidedLocked() bool {
	return r.recorded != nil || (r.obj != nil && meta.IsStatusConditionTrue(r.obj.Status.Conditions, contract.ConditionDecided))
}

// Current is r's Gang as last read or written (nil: not yet).
func (r *GangRecord) Current() *v1alpha1.Gang {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.obj == nil {
		return nil
	}
	return r.obj.DeepCopy()
}

// Attempt is the job attempt r is the Gang of.
func (r *GangRecord) Attempt() int32 { return r.t.attempt }

func (r *GangRecord) key() types.NamespacedName {
	return types.NamespacedName{Namespace: r.t.ns, Name: v1alpha1.GangName(r.t.kind, r.t.name, r.t.attempt)}
}

// Book is the Gang resources of the jobs this replica gates, by job
// UID, each with its writes' state: the one owner of that table.
type Book struct {
	mu  sync.Mutex
	res map[types.UID]*GangRecord
}

func newBook() *Book { return &Book{res: map[types.UID]*GangRecord{}} }

// ForJob returns the Gang resource of job o's current attempt (a gang
// timeout of def unless the job sets its own). A cache that still shows
// an earlier attempt keeps the later one.
func (b *Book) ForJob(o client.Object, kind string, def time.Duration) *GangRecord {
	attempt := contract.Attempt(o.GetAnnotations())
	b.mu.Lock()
	defer b.mu.Unlock()
	if r := b.res[o.GetUID()]; r != nil && r.t.attempt >= attempt {
		return r
	}
	timeout, _ := decision.JobTimeout(o, def)
	k, _ := kubeflow.ByName(kind)
	r := &GangRecord{
		t:          target{kind: kind, ns: o.GetNamespace(), name: o.GetName(), uid: o.GetUID(), attempt: attempt},
		apiVersion: k.GVK().GroupVersion().String(), expected: int32(kubeflow.RankPods(kubeflow.MustFromObject(o))), timeout: timeout,
	}
	b.res[o.GetUID()] = r
	return r
}

// Lookup is the Gang resource this replica knows for job uid.
func (b *Book) Lookup(uid types.UID) *GangRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.res[uid]
}

// Drop forgets the Gang resources of job key (namespace/kind/name).
func (b *Book) Drop(key string) { b.drop(key, nil) }

// drop forgets the Gang resource of job key, or only attempt t's when t
// is given.
func (b *Book) drop(key string, t *target) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid, r := range b.res {
		if r.t.key() == key && (t == nil || (r.t.uid == t.uid && r.t.attempt == t.attempt)) {
			delete(b.res, uid)
		}
	}
}

// adopt takes in r, a Gang an earlier leader wrote: always with
// replace, else unless a later attempt of its job is known.
func (b *Book) adopt(r *GangRecord, replace bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.res[r.t.uid]; replace || cur == nil || cur.t.attempt < r.t.attempt {
		b.res[r.t.uid] = r
	}
}

// Pending is job uid's verdict that is recorded and not yet on the job.
func (b *Book) Pending(uid types.UID) (*decision.Decision, bool) {
	r := b.Lookup(uid)
	if r == nil {
		return nil, false
	}
	d, _ := r.unapplied()
	return d, d != nil
}

// unapplied counts the verdicts recorded and not yet on their jobs.
func (b *Book) unapplied() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, r := range b.res {
		if d, _ := r.unapplied(); d != nil {
			n++
		}
	}
	return n
}

// newGangObject is the Gang r names, without status.
func newGangObject(r *GangRecord) *v1alpha1.Gang {
	labels := map[string]string{contract.LabelJobKind: r.t.kind, contract.LabelJobUID: string(r.t.uid)}
	if len(validation.IsValidLabelValue(r.t.name)) == 0 {
		labels[contract.LabelJobName] = r.t.name
	}
	key := r.key()
	g := &v1alpha1.Gang{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: r.apiVersion, Kind: r.t.kind, Name: r.t.name, UID: r.t.uid,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false)}}},
		Spec: v1alpha1.GangSpec{
			Job:     v1alpha1.JobReference{APIVersion: r.apiVersion, Kind: r.t.kind, Name: r.t.name, UID: r.t.uid},
			Attempt: r.t.attempt, ExpectedRanks: r.expected,
		},
	}
	if r.timeout > 0 {
		g.Spec.Timeout = &metav1.Duration{Duration: r.timeout}
	}
	return g
}

// ownedBy says whether Gang g belongs to job t: it names the job (kind,
// name, UID) and the job is its controller owner.
func ownedBy(g *v1alpha1.Gang, t target) bool {
	j := g.Spec.Job
	if j.Kind != t.kind || j.Name != t.name || j.UID != t.uid || g.Namespace != t.ns {
		return false
	}
	ref := metav1.GetControllerOfNoCopy(g)
	return ref != nil && ref.Kind == t.kind && ref.Name == t.name && ref.UID == t.uid
}

// ensureObject returns r's Gang, created if needed. A Gang of that name
// that belongs to another job (one deleted and created again before the
// garbage collector ran, or one not written by the controller) is deleted
// and created again.
func (w *Writes) ensureObject(ctx context.Context, r *GangRecord) (*v1alpha1.Gang, error) {
	if obj := r.Current(); obj != nil {
		return obj, nil
	}
	for attempt := 0; attempt < 3; attempt++ {
		obj := newGangObject(r)
		err := w.gangAPI.Create(ctx, obj)
		if err == nil {
			r.set(obj)
			return obj, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
		cur, err := w.refresh(ctx, r)
		if err != nil || cur != nil {
			return cur, err
		}
	}
	return nil, fmt.Errorf("gang %s keeps changing", r.key())
}

// refresh reads r's Gang from the API server. It returns nil (and no
// error) when there is none now: it was missing, or it belonged to another
// job and was deleted.
func (w *Writes) refresh(ctx context.Context, r *GangRecord) (*v1alpha1.Gang, error) {
	cur := &v1alpha1.Gang{}
	err := w.gangAPI.Get(ctx, r.key(), cur)
	if apierrors.IsNotFound(err) {
		r.mu.Lock()
		r.obj = nil
		r.mu.Unlock()
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ownedBy(cur, r.t) {
		r.set(cur)
		return cur, nil
	}
	w.log.Info("deleting a Gang that does not belong to the job it is named for", "gang", r.key().String(),
		"job", r.t.key(), "uid", r.t.uid, "gangJobUID", cur.Spec.Job.UID)
	err = w.gangAPI.Delete(ctx, cur, client.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return nil, err
	}
	return nil, nil
}

// gangSnapshot is an open gang's progress.
type gangSnapshot = gangstore.Snapshot

// rankStatuses lists ranks for a Gang's status, bounded by the limits of
// the API: at most MaxRankEntries, the failing ranks first when there are
// more (then the warning ones), in rank order; omitted counts the rest.
func rankStatuses(ranks []preflight.RankReport) (out []v1alpha1.RankStatus, omitted int32) {
	keep := ranks
	if len(ranks) > v1alpha1.MaxRankEntries {
		keep = append([]preflight.RankReport(nil), ranks...)
		order := map[verdict.Verdict]int{verdict.VerdictFail: 0, verdict.VerdictWarn: 1}
		rankOf := func(v verdict.Verdict) int {
			if o, ok := order[v]; ok {
				return o
			}
			return 2
		}
		sort.SliceStable(keep, func(i, j int) bool { return rankOf(keep[i].Report.Verdict) < rankOf(keep[j].Report.Verdict) })
		keep = keep[:v1alpha1.MaxRankEntries]
		sort.Slice(keep, func(i, j int) bool { return keep[i].Rank < keep[j].Rank })
		omitted = int32(len(ranks) - len(keep))
	}
	out = make([]v1alpha1.RankStatus, 0, len(keep))
	for _, rr := range keep {
		s := v1alpha1.RankStatus{Rank: int32(rr.Rank), Pod: rr.Pod, Node: rr.Node, Verdict: string(rr.Report.Verdict), Rules: gangstore.RuleIDs(rr.Report, gangstore.MaxRankRules)}
		if s.Verdict == "" {
			s.Verdict = string(verdict.VerdictPass)
		}
		for _, d := range rr.Report.Devices {
			if len(s.Devices) == v1alpha1.MaxRankDevices {
				break
			}
			s.Devices = append(s.Devices, d.ID)
			if dd, ok := draDevice(d); ok {
				s.DRADevices = append(s.DRADevices, dd)
			}
		}
		if rr.Source == devicesource.DRA {
			s.Source = rr.Source
		}
		out = append(out, s)
	}
	return out, omitted
}

// setProgress writes an open gang's progress into st: phase, ranks
// reported of expected, the ranks, the first report and the deadline.
// The first report never moves later than what st already holds.
func setProgress(st *v1alpha1.GangStatus, s gangSnapshot, waiting string) {
	st.ReportedRanks = int32(len(s.Ranks))
	st.Progress = strconv.Itoa(len(s.Ranks)) + "/" + strconv.Itoa(s.Expected)
	st.Ranks, st.RanksOmitted = rankStatuses(s.Ranks)
	// As the API server stores them (to the second), so that an unchanged
	// status compares equal.
	if !s.FirstAt.IsZero() && (st.FirstReportAt == nil || s.FirstAt.Before(st.FirstReportAt.Time)) {
		t := metav1.NewTime(s.FirstAt).Rfc3339Copy()
		st.FirstReportAt = &t
	}
	if !s.Deadline.IsZero() {
		t := metav1.NewTime(s.Deadline).Rfc3339Copy()
		st.Deadline = &t
	}
	if st.Verdict != "" {
		return
	}
	st.WaitingFor = verdict.Truncate(waiting, v1alpha1.MaxMessageLength)
	switch {
	case waiting != "":
		st.Phase = v1alpha1.PhaseWaitingForPlacement
		st.Reason = oneLine(waiting)
	case len(s.Ranks) == 0:
		st.Phase, st.Reason = v1alpha1.PhaseWaitingForRanks, "no rank has reported yet"
	default:
		st.Phase = v1alpha1.PhaseWaitingForRanks
		st.Reason = fmt.Sprintf("waiting for %d more of %d ranks", max(s.Expected-len(s.Ranks), 0), s.Expected)
	}
}

// oneLine is the first line of s, within the Reason column's limit.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return verdict.Truncate(s, v1alpha1.MaxReasonLength)
}

// setVerdict records d in st (with the gang's latest progress): the
// verdict fields, the phase and the Decided condition.
func setVerdict(st *v1alpha1.GangStatus, s gangSnapshot, d *decision.Decision, generation int64) {
	setProgress(st, s, "")
	st.WaitingFor = ""
	st.Verdict = string(d.Report.Verdict)
	st.Rules = gangstore.RuleIDs(d.Report, 64)
	st.Report = decision.CompactReport(d.Report, decision.MaxReportLen)
	st.DecidedAt = &metav1.Time{Time: d.DecidedAt}
	st.DecidedBy = verdict.Truncate(d.DecidedBy, 256)
	st.Phase, st.Action = v1alpha1.PhasePassed, ""
	msg := decision.Summary(d.Report)
	if d.Report.Failed() {
		st.Phase, st.Action = v1alpha1.PhaseFailed, d.Action
		msg = decision.FailReason(d.Report, v1alpha1.MaxMessageLength)
	}
	st.Message = verdict.Truncate(msg, v1alpha1.MaxMessageLength)
	st.Reason = oneLine(msg)
	st.MissingRanks, st.MissingCount = nil, 0
	have := map[int]bool{}
	for _, r := range s.Ranks {
		have[r.Rank] = true
	}
	for i := 0; i < s.Expected; i++ {
		if !have[i] {
			st.MissingCount++
			if len(st.MissingRanks) < v1alpha1.MaxMissingEntries {
				st.MissingRanks = append(st.MissingRanks, int32(i))
			}
		}
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: contract.ConditionDecided, Status: metav1.ConditionTrue,
		Reason: string(st.Phase), Message: "verdict " + st.Verdict + " recorded by " + st.DecidedBy, ObservedGeneration: generation})
}

// gangDecision reads the verdict recorded in a Gang's status.
func gangDecision(g *v1alpha1.Gang) (*decision.Decision, bool) {
	st := &g.Status
	if !meta.IsStatusConditionTrue(st.Conditions, contract.ConditionDecided) {
		return nil, false
	}
	v := verdict.Verdict(st.Verdict)
	if v != verdict.VerdictPass && v != verdict.VerdictWarn && v != verdict.VerdictFail {
		return nil, false
	}
	d := &decision.Decision{Action: st.Action, DecidedBy: st.DecidedBy, Adopted: true}
	if st.DecidedAt != nil {
		d.DecidedAt = st.DecidedAt.Time
	}
	if err := json.Unmarshal([]byte(st.Report), &d.Report); err != nil || d.Report.Verdict != v {
		d.Report = verdict.Report{Verdict: v, Subject: st.Message, Findings: []verdict.Finding{}}
	}
	return d, true
}

// draDevice is d as the Gang shows a device that came through DRA (its
// DRA name is driver/pool/device: a driver and a device name hold no
// slash, a pool name may).
func draDevice(d verdict.DeviceSummary) (v1alpha1.DRADevice, bool) {
	i, j := strings.Index(d.DRA, "/"), strings.LastIndex(d.DRA, "/")
	if i <= 0 || j <= i || j == len(d.DRA)-1 {
		return v1alpha1.DRADevice{}, false
	}
	dev := v1alpha1.DRADevice{Driver: verdict.Truncate(d.DRA[:i], 63), Pool: verdict.Truncate(d.DRA[i+1:j], 253), Device: verdict.Truncate(d.DRA[j+1:], 128),
		Profile: verdict.Truncate(d.Profile, 64)}
	// A dynamic MIG placement has no UUID until the driver creates its
	// instance: its ID is then the rank's own numbering (GPU:index), not
	// one to show as a UUID.
	if !topology.IsIndexID(d.ID) {
		dev.UUID = verdict.Truncate(d.ID, 128)
	}
	return dev, true
}
