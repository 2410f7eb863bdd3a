//go:build linux

package launcher

import (
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// pump carries one of CMD's streams through and hands every chunk to the
// scanner after it went out, so that scanning never delays output.
//
// When the destination is a pipe (a shell pipeline, the container
// runtime's FIFO in Kubernetes), tee(2) duplicates the chunk from CMD's
// pipe into it without copying the bytes, and one read(2) then takes the
// same bytes for the scanner: one copy instead of read(2)+write(2)'s two.
// Otherwise the chunk is read and written.
//
// CMD's pipe is read with non-blocking calls and ppoll(2) with a short
// timeout rather than Go's poller: a pump that must give up on a pipe that
// a process outside CMD's group keeps open (drain) sees abandon within
// pollTick, and waiting costs no goroutine hand-offs.
type pump struct {
	fd    int       // read end of CMD's pipe (O_NONBLOCK)
	dst   io.Writer // when teeFD < 0
	teeFD int       // dst's descriptor when it is a pipe; -1 otherwise
	// errw is set when dst is the stderr shared with rankgate's lines:
	// tee happens under its lock.
	errw *stderrWriter
	scan *lineScanner
	mon  *monitor
	done chan struct{}
	werr error
	seen int64
	// waiting is when the pump began to wait for input (UnixNano); 0
	// while it has data or is writing.
	waiting atomic.Int64
	abandon atomic.Bool
}

const (
	pollTick        = 100 * time.Millisecond
	spliceFNonblock = 0x2 // SPLICE_F_NONBLOCK
	fionread        = 0x541B
	pollIn          = 0x1
	pollOut         = 0x4
)

// newPipe makes a pipe for one of CMD's streams: CMD gets the blocking
// write end, rankgate keeps the read end, non-blocking.
func newPipe() (r int, w *os.File, err error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return -1, nil, err
	}
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return -1, nil, err
	}
	growPipe(fds[0])
	return fds[0], os.NewFile(uintptr(fds[1]), "|1"), nil
}

// growPipe raises a pipe's kernel buffer to pipeSize (never lowers it).
// On CMD's pipes it lets CMD run ahead while rankgate forwards; on the
// destination pipe it lets one tee(2) move up to pipeSize instead of the
// default 64 KiB, which cuts rankgate's wake-ups (and the reader's) about
// sixteenfold. A refusal (pipe-max-size, the user's pipe quota) is fine.
func growPipe(fd int) {
	cur, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fGetPipeSz, 0)
	if e == 0 && int(cur) < pipeSize {
		_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), fSetPipeSz, pipeSize)
	}
}

func newPump(fd int, dst io.Writer, m *monitor) *pump {
	p := &pump{fd: fd, dst: dst, teeFD: -1, scan: newLineScanner(m.line), mon: m, done: make(chan struct{})}
	w := dst
	if ew, ok := dst.(*stderrWriter); ok {
		p.errw = ew
		w = ew.w
	}
	if f, ok := w.(*os.File); ok {
		if p.teeFD = fifoFD(f); p.teeFD >= 0 {
			growPipe(p.teeFD)
		}
	}
	return p
}

// fifoFD is f's descriptor when f is a pipe, else -1. It does not use
// f.Fd(), which would switch f to blocking mode.
func fifoFD(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	_ = rc.Control(func(u uintptr) {
		var st syscall.Stat_t
		if syscall.Fstat(int(u), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO {
			fd = int(u)
		}
	})
	return fd
}

func (p *pump) run() {
	defer close(p.done)
	defer syscall.Close(p.fd)
	buf := make([]byte, pumpBuf)
	for {
		n, eof, err := p.transfer(buf)
		if n > 0 {
			p.scan.scan(buf[:n], p.mon.mode(p.seen))
			p.seen += int64(n)
		}
		if err != nil {
			// Like a shell pipeline: the reader went away; closing this end
			// makes CMD's next write to the stream fail (EPIPE, SIGPIPE).
			p.werr = err
			return
		}
		if eof {
			p.scan.flush(p.mon.mode(p.seen))
			return
		}
	}
}

// transfer passes the next chunk through and returns it in buf[:n].
func (p *pump) transfer(buf []byte) (n int, eof bool, err error) {
	for {
		if p.abandon.Load() {
			return 0, true, nil
		}
		if p.teeFD >= 0 {
			n, eof, err, again := p.tee(buf)
			if !again {
				return n, eof, err
			}
			continue
		}
		k, rerr := syscall.Read(p.fd, buf)
		switch {
		case rerr == syscall.EINTR:
			continue
		case rerr == syscall.EAGAIN:
			p.wait(p.fd, pollIn, true)
			continue
		case rerr != nil || k <= 0:
			return 0, true, nil
		}
		if _, werr := p.dst.Write(buf[:k]); werr != nil {
			return k, false, werr
		}
		return k, false, nil
	}
}

// tee duplicates what CMD's pipe holds into the destination pipe, then
// reads the same bytes for the scanner. again: nothing happened, call
// again (after waiting for input or for room in the destination).
func (p *pump) tee(buf []byte) (n int, eof bool, err error, again bool) {
	if p.errw != nil {
		p.errw.mu.Lock()
		defer p.errw.mu.Unlock()
	}
	t, terr := syscall.Tee(p.fd, p.teeFD, len(buf), spliceFNonblock)
	switch {
	case terr == nil && t == 0:
		return 0, true, nil, false
	case terr == syscall.EINTR:
		return 0, false, nil, true
	case terr == syscall.EAGAIN:
		if p.errw != nil {
			p.errw.mu.Unlock() // rankgate's own lines may go out meanwhile
			defer p.errw.mu.Lock()
		}
		if available(p.fd) > 0 {
			p.wait(p.teeFD, pollOut, false) // the destination is full
		} else {
			p.wait(p.fd, pollIn, true)
		}
		return 0, false, nil, true
	case terr == syscall.EINVAL:
		// Not a pipe tee can write to after all: copy from now on.
		p.teeFD = -1
		return 0, false, nil, true
	case terr != nil:
		return 0, false, terr, false
	}
	// The bytes are in CMD's pipe still: reading takes exactly them.
	for n < int(t) {
		k, rerr := syscall.Read(p.fd, buf[n:t])
		if rerr == syscall.EINTR {
			continue
		}
		if rerr != nil || k <= 0 {
			break
		}
		n += k
	}
	if p.errw != nil && n > 0 {
		p.errw.midLine = buf[n-1] != '\n'
	}
	return n, false, nil, false
}

// wait blocks until fd is ready for events or pollTick passed.
func (p *pump) wait(fd int, events int16, input bool) {
	if input {
		p.waiting.Store(time.Now().UnixNano())
		defer p.waiting.Store(0)
	}
	pfd := struct {
		fd             int32
		events, revent int16
	}{int32(fd), events, 0}
	ts := syscall.NsecToTimespec(int64(pollTick))
	_, _, _ = syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
}

// available is how many bytes a pipe holds.
func available(fd int) int {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), fionread, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0
	}
	return int(n)
}

// idle is how long the pump has been waiting for input.
func (p *pump) idle() time.Duration {
	t := p.waiting.Load()
	if t == 0 {
		return 0
	}
	return time.Since(time.Unix(0, t))
}
