// Package fileinput reads the files users hand to rankgate (flag values,
// the config file, mounted files) with a bound. Only regular files are
// read, or standard input where an input accepts "-"; never more than a
// limit per input; and a read of standard input ends when the context does.
// A named pipe would otherwise block the open forever, and /dev/zero would
// grow memory without end.
package fileinput

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Stdin is the path that names standard input, where an input accepts it.
const Stdin = "-"

var (
	// ErrNotRegular: the path is a named pipe, a device, a socket or a
	// directory.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the input holds more bytes than its limit.
	ErrTooLarge = errors.New("larger than the limit")
	// ErrStdinRefused: "-" was given for an input that is only read from a
	// file.
	ErrStdinRefused = errors.New("not accepted for this input: give a file")
)

// Error is a failure to read one input: it names the input and, for
// ErrTooLarge, the limit. Err is one of the sentinels above, an fs error
// (fs.ErrNotExist, fs.ErrPermission, ...) or the context's error.
type Error struct {
	Path  string
	Limit int64
	// Mode is what the path is, for ErrNotRegular.
	Mode fs.FileMode
	Err  error

	stdinOK bool
}

func (e *Error) Error() string {
	name := e.Path
	if name == Stdin {
		name = "standard input"
	}
	return name + ": " + e.Reason()
}

// Reason is the message without the input's name, for callers whose own
// error type names the file.
func (e *Error) Reason() string {
	switch {
	case errors.Is(e.Err, ErrTooLarge):
		return fmt.Sprintf("larger than %s, the most rankgate reads from this input", Size(e.Limit))
	case errors.Is(e.Err, ErrNotRegular):
		hint := "give a regular file"
		if e.stdinOK {
			hint += ", or - to read standard input"
		}
		return fmt.Sprintf("not a regular file (%s): %s", describe(e.Mode), hint)
	case errors.Is(e.Err, context.Canceled), errors.Is(e.Err, context.DeadlineExceeded):
		return "reading stopped: " + e.Err.Error()
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode: an input that cannot be read is bad input, exit 2 (the
// verdict.ExitCoder contract; callers for whom the file is not the user's
// input wrap it in an error of their own).
func (e *Error) ExitCode() int { return 2 }

// Size prints a limit: "16 MiB", "64 KiB", "100 bytes".
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func describe(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "mode " + m.Type().String()
}

// ReadFile reads the regular file at path, or stdin when path is "-" and
// stdin is not nil, and fails with an *Error when it holds more than limit
// bytes, is not a regular file, or ctx ends while standard input is read.
func ReadFile(ctx context.Context, path string, stdin io.Reader, limit int64) ([]byte, error) {
	r, err := Open(ctx, path, stdin, limit)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	hint := int64(bytes.MinRead)
	if s, ok := r.(*file); ok && s.size > 0 {
		hint = min(s.size, limit) + 1 // one allocation when the size holds
	}
	buf := bytes.NewBuffer(make([]byte, 0, hint))
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Open is ReadFile for inputs that are decoded as a stream: the reader
// fails with an *Error (ErrTooLarge) once limit bytes were read and more
// follow, and with one wrapping ctx.Err() once ctx ended.
func Open(ctx context.Context, path string, stdin io.Reader, limit int64) (io.ReadCloser, error) {
	if path == Stdin {
		if stdin == nil {
			return nil, &Error{Path: path, Err: ErrStdinRefused}
		}
		return newStream(ctx, path, stdin, limit), nil
	}
	fail := func(err error) error {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return &Error{Path: path, Err: err, stdinOK: stdin != nil}
	}
	// Stat before opening: opening a named pipe waits for a writer.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fail(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &Error{Path: path, Mode: fi.Mode(), Err: ErrNotRegular, stdinOK: stdin != nil}
	}
	if fi.Size() > limit {
		return nil, &Error{Path: path, Limit: limit, Err: ErrTooLarge}
	}
	// The path may have changed since: open without waiting and look again.
	f, err := openNoWait(path)
	if err != nil {
		return nil, fail(err)
	}
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, fail(err)
		}
		return nil, &Error{Path: path, Mode: fi.Mode(), Err: ErrNotRegular, stdinOK: stdin != nil}
	}
	return &file{bounded: bounded{ctx: ctx, path: path, r: f, limit: limit}, f: f, size: fi.Size()}, nil
}

// bounded reads at most limit bytes of r; one more is an *Error.
type bounded struct {
	ctx   context.Context
	path  string
	r     io.Reader
	limit int64
	read  int64
}

func (b *bounded) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, &Error{Path: b.path, Err: err}
	}
	if b.read > b.limit {
		return 0, b.tooLarge()
	}
	// Ask for one byte past the limit, to tell "exactly limit" from "more".
	if left := b.limit + 1 - b.read; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	if b.read > b.limit {
		return n - int(b.read-b.limit), b.tooLarge()
	}
	return n, err
}

func (b *bounded) tooLarge() error { return &Error{Path: b.path, Limit: b.limit, Err: ErrTooLarge} }

type file struct {
	bounded
	f    *os.File
	size int64
}

func (f *file) Close() error { return f.f.Close() }

// stream reads standard input (or any reader that may block) through a
// goroutine, so that Read returns when ctx ends even while the underlying
// read is blocked. That goroutine stays blocked until its read returns:
// a command that was interrupted exits anyway.
type stream struct {
	ctx     context.Context
	path    string
	src     *bounded
	started bool
	chunks  chan chunk
	closed  chan struct{} // stops the pump when the reader gives up early
	cur     []byte
	err     error
}

type chunk struct {
	data []byte
	err  error
}

const chunkSize = 32 << 10

func newStream(ctx context.Context, path string, r io.Reader, limit int64) *stream {
	return &stream{ctx: ctx, path: path, src: &bounded{ctx: context.WithoutCancel(ctx), path: path, r: r, limit: limit},
		chunks: make(chan chunk), closed: make(chan struct{})}
}

func (s *stream) pump() {
	defer close(s.chunks)
	for {
		buf := make([]byte, chunkSize)
		n, err := s.src.Read(buf)
		select {
		case s.chunks <- chunk{buf[:n], err}:
		case <-s.ctx.Done():
			return
		case <-s.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

func (s *stream) Read(p []byte) (int, error) {
	for len(s.cur) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if !s.started {
			s.started = true
			go s.pump()
		}
		select {
		case c, ok := <-s.chunks:
			if !ok {
				s.err = s.ctxErr()
				continue
			}
			s.cur, s.err = c.data, c.err
		case <-s.ctx.Done():
			s.err = s.ctxErr()
		}
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

func (s *stream) ctxErr() error {
	if err := s.ctx.Err(); err != nil {
		return &Error{Path: s.path, Err: err}
	}
	return io.ErrUnexpectedEOF
}

// Close stops handing out data; standard input itself stays open.
func (s *stream) Close() error {
	s.cur = nil
	if s.err == nil {
		s.err = &Error{Path: s.path, Err: os.ErrClosed}
	}
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	return nil
}
