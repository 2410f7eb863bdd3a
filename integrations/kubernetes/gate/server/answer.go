package server

import (
	"bytes"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rankgate/rankgate/integrations/kubernetes/gate"
)

// Every rank of a decided gang gets the same answer but for its rank
// number, and they all get it at once: thousands of long polls end when
// the verdict lands. The answer is encoded once per verdict and each
// rank's is the shared bytes around its number, byte for byte what
// json.Marshal gives for that rank (answer_test.go checks it).

// maxShared bounds the verdicts whose encoding is kept; past it the
// cache starts over (a verdict is answered in a burst, then rarely).
const maxShared = 1024

// sharedAnswer is the encoding of an answer with its rank cut out: the
// answer for rank r is pre, r, post.
type sharedAnswer struct {
	of        gate.Response // the answer encoded, Rank aside
	pre, post []byte
}

// answers caches sharedAnswers by the verdict they carry. A Backend
// shares one *verdict.Report among the answers of a gang and never
// changes it once answered (see Backend).
type answers struct {
	m sync.Map // *verdict.Report -> *sharedAnswer
	n atomic.Int64
}

// rankMark stands for the rank while encoding: the widest int, so that
// the size bound (fitAnswer) holds for every rank.
const rankMark = math.MinInt64

var rankField = []byte(`,"rank":` + strconv.FormatInt(rankMark, 10) + `,`)

// shared returns the encoded answer for resp's verdict, encoding it if
// none matches resp. ok is false if resp is not a decided answer.
func (a *answers) shared(resp *gate.Response) (*sharedAnswer, bool) {
	if resp.Verdict == nil {
		return nil, false
	}
	if v, ok := a.m.Load(resp.Verdict); ok {
		if sa := v.(*sharedAnswer); sameButRank(&sa.of, resp) {
			return sa, true
		}
	}
	of := *resp
	of.Rank = rankMark
	b := fitAnswer(&of, gate.MaxAnswer)
	// The fields before the rank are strings, in which a quote is always
	// escaped: the first match is the rank field.
	i := bytes.Index(b, rankField)
	if i < 0 {
		return nil, false
	}
	mark := i + len(`,"rank":`)
	sa := &sharedAnswer{of: of, pre: b[:mark:mark], post: b[mark+len(rankField)-len(`,"rank":`)-1:]}
	if a.n.Add(1) > maxShared {
		a.m.Clear()
		a.n.Store(1)
	}
	a.m.Store(resp.Verdict, sa)
	return sa, true
}

// sameButRank says whether b encodes as a did, rank aside.
func sameButRank(a, b *gate.Response) bool {
	return a.APIVersion == b.APIVersion && a.State == b.State && a.Job == b.Job &&
		a.Expected == b.Expected && a.Reported == b.Reported && sameTime(a.Deadline, b.Deadline) &&
		a.Verdict == b.Verdict && sameTime(a.DecidedAt, b.DecidedAt) && a.Action == b.Action &&
		a.OmittedFindings == b.OmittedFindings
}

// sameTime: the same instant, encoded alike.
func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b) && a.Location() == b.Location()
}

// write writes the answer for rank.
func (sa *sharedAnswer) write(w http.ResponseWriter, rank int) {
	var num [24]byte
	_, _ = w.Write(sa.pre)
	_, _ = w.Write(strconv.AppendInt(num[:0], int64(rank), 10))
	_, _ = w.Write(sa.post)
}

// Header values shared by every answer (the server only reads them).
var jsonContentType = []string{"application/json"}

// httpDate is the Date header, formatted once a second instead of once
// per answer.
type httpDate struct {
	v atomic.Pointer[dateValue]
}

type dateValue struct {
	sec    int64
	header []string
}

func (d *httpDate) header(now time.Time) []string {
	sec := now.Unix()
	if v := d.v.Load(); v != nil && v.sec == sec {
		return v.header
	}
	v := &dateValue{sec: sec, header: []string{now.UTC().Format(http.TimeFormat)}}
	d.v.Store(v)
	return v.header
}
