// Command testbin is the launcher tests' helper: "testbin child ACTION..."
// plays a training process (replays real NCCL logs, hangs, crashes,
// ignores SIGTERM, spawns grandchildren, writes large or binary output);
// "testbin launch [flags] -- CMD..." is a minimal rankgate launch (the
// launcher package behind a flag parser and real signal handling), used
// where the test needs rankgate as a separate process: signals to
// rankgate itself, the subreaper, the pass-through and start-up benchmarks.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rankgate/rankgate/launcher"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testbin child ACTION... | testbin launch [flags] -- CMD...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "child":
		child(os.Args[2:])
	case "launch":
		os.Exit(launch(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "testbin: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func launch(args []string) int {
	fs := flag.NewFlagSet("launch", flag.ExitOnError)
	initTimeout := fs.Duration("init-timeout", launcher.DefaultInitTimeout, "")
	grace := fs.Duration("grace", launcher.DefaultGrace, "")
	readyPattern := fs.String("ready-pattern", "", "")
	readyFile := fs.String("ready-file", "", "")
	localRanks := fs.Int("local-ranks", 0, "")
	subreaper := fs.Bool("subreaper", true, "")
	termLog := fs.String("termination-log", "", "")
	rusage := fs.String("rusage", "", "write this process's own CPU seconds (user+system) to the file at exit")
	_ = fs.Parse(args)
	opts := launcher.Options{
		Command: fs.Args(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Grace: *grace, InitTimeout: *initTimeout, ReadyFile: *readyFile, LocalRanks: *localRanks,
		Subreaper: *subreaper, TerminationLog: *termLog,
	}
	if *readyPattern != "" {
		opts.ReadyPattern = regexp.MustCompile(*readyPattern)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	opts.Signals = sigs
	res, err := launcher.Run(context.Background(), opts)
	if *rusage != "" {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		cpu := float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
		_ = os.WriteFile(*rusage, []byte(strconv.FormatFloat(cpu, 'f', 6, 64)), 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rankgate: %v\n", err)
	}
	return res.ExitCode
}

var stdout = bufio.NewWriterSize(os.Stdout, 64<<10)

func flush() { _ = stdout.Flush() }

func die(format string, args ...any) {
	flush()
	fmt.Fprintf(os.Stderr, "testbin: "+format+"\n", args...)
	os.Exit(99)
}

func child(actions []string) {
	defer flush()
	for _, a := range actions {
		verb, arg, _ := strings.Cut(a, ":")
		do, ok := childActions[verb]
		if !ok {
			die("unknown action %q", a)
		}
		do(verb, arg)
	}
}

// childActions: what "testbin child VERB:ARG..." does for each verb.
var childActions = map[string]func(verb, arg string){
	"out": func(_, arg string) {
		fmt.Fprintln(stdout, arg)
		flush()
	},
	"err": func(_, arg string) {
		flush()
		fmt.Fprintln(os.Stderr, arg)
	},
	"replay":    replayAction,
	"replayerr": replayAction,
	"sleep": func(_, arg string) {
		flush()
		d, err := time.ParseDuration(arg)
		if err != nil {
			die("%v", err)
		}
		time.Sleep(d)
	},
	"exit": func(_, arg string) {
		flush()
		n, _ := strconv.Atoi(arg)
		os.Exit(n)
	},
	"hang": func(_, _ string) {
		flush()
		select {}
	},
	"ignore": func(_, arg string) {
		signal.Ignore(sigByName(arg))
	},
	"record": func(_, arg string) {
		// record:FILE appends the name of every INT, TERM, HUP, QUIT
		// received to FILE and carries on.
		ch := make(chan os.Signal, 8)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
		go func(path string) {
			for s := range ch {
				f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				if err == nil {
					fmt.Fprintln(f, s.(syscall.Signal).String())
					f.Close()
				}
			}
		}(arg)
	},
	"selfkill": func(_, arg string) {
		flush()
		_ = syscall.Kill(os.Getpid(), sigByName(arg))
		time.Sleep(time.Second)
	},
	"spawn":    spawnAction,
	"spawnsid": spawnAction,
	"write":    writeAction,
	"writeerr": writeAction,
	"lines":    linesAction,
	"lineserr": linesAction,
	"steps":    linesAction,
	"stepserr": linesAction,
	"longline": func(_, arg string) {
		n, _ := strconv.Atoi(arg)
		_, _ = stdout.WriteString(strings.Repeat("x", n) + " NCCL INFO long line end\n")
	},
	"init": func(_, arg string) {
		// init:RANK:NRANKS prints this process's NCCL Init START and
		// COMPLETE lines, in NCCL 2.27's format.
		r, nr, _ := strings.Cut(arg, ":")
		printInit(r, nr, true)
	},
	"start": func(_, arg string) {
		r, nr, _ := strings.Cut(arg, ":")
		printInit(r, nr, false)
	},
	"ranks": func(_, arg string) {
		// ranks:N[:HANG] starts N rank processes that each print their
		// init lines; rank HANG prints Init START only and hangs.
		n, hang, _ := strings.Cut(arg, ":")
		runRanks(n, hang)
	},
	"env": func(_, arg string) {
		v, ok := os.LookupEnv(arg)
		if !ok {
			v = "<unset>"
		}
		fmt.Fprintf(stdout, "%s=%s\n", arg, v)
		flush()
	},
	"stamp": func(_, _ string) {
		fmt.Fprintln(stdout, time.Now().UnixNano())
		flush()
	},
	"touch": func(_, arg string) {
		if err := os.WriteFile(arg, nil, 0o644); err != nil {
			die("%v", err)
		}
	},
}

func replayAction(verb, arg string) {
	data, err := os.ReadFile(arg)
	if err != nil {
		die("%v", err)
	}
	if verb == "replay" {
		_, _ = stdout.Write(data)
		flush()
	} else {
		flush()
		_, _ = os.Stderr.Write(data)
	}
}

func spawnAction(verb, arg string) {
	// spawn:N:PIDFILE starts N grandchildren that ignore SIGTERM and
	// hang; spawnsid puts them in a session of their own (they leave
	// the process group).
	n, path, _ := strings.Cut(arg, ":")
	k, _ := strconv.Atoi(n)
	var pids []string
	for i := 0; i < k; i++ {
		c := exec.Command(os.Args[0], "child", "ignore:TERM", "hang")
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if verb == "spawnsid" {
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
		if err := c.Start(); err != nil {
			die("%v", err)
		}
		pids = append(pids, strconv.Itoa(c.Process.Pid))
	}
	if err := os.WriteFile(path, []byte(strings.Join(pids, "\n")+"\n"), 0o644); err != nil {
		die("%v", err)
	}
}

func writeAction(verb, arg string) {
	// write:N writes N bytes of seeded random binary data.
	n, _ := strconv.ParseInt(arg, 10, 64)
	w := stdout
	if verb == "writeerr" {
		flush()
		w = bufio.NewWriterSize(os.Stderr, 64<<10)
	}
	writeRandom(w, n)
	_ = w.Flush()
}

func linesAction(verb, arg string) {
	// lines:N writes N bytes of log-like text lines with an NCCL
	// INFO line every 64 lines; steps:N the same without NCCL lines.
	n, _ := strconv.ParseInt(arg, 10, 64)
	f := os.Stdout
	if strings.HasSuffix(verb, "err") {
		f = os.Stderr
	}
	flush()
	writeLines(f, n, strings.HasPrefix(verb, "lines"))
}

func sigByName(s string) syscall.Signal {
	switch s {
	case "INT":
		return syscall.SIGINT
	case "TERM":
		return syscall.SIGTERM
	case "HUP":
		return syscall.SIGHUP
	case "QUIT":
		return syscall.SIGQUIT
	case "KILL":
		return syscall.SIGKILL
	case "SEGV":
		return syscall.SIGSEGV
	}
	die("unknown signal %q", s)
	return 0
}

func printInit(rank, nranks string, complete bool) {
	host, _ := os.Hostname()
	pid := os.Getpid()
	fmt.Fprintf(stdout, "%s:%d:%d [0] NCCL INFO ncclCommInitRankConfig comm 0x55d0 rank %s nranks %s cudaDev 0 nvmlDev 0 busId 101d0 commId 0xb07 - Init START\n", host, pid, pid+1, rank, nranks)
	if complete {
		fmt.Fprintf(stdout, "%s:%d:%d [0] NCCL INFO ncclCommInitRankConfig comm 0x55d0 rank %s nranks %s cudaDev 0 nvmlDev 0 busId 101d0 commId 0xb07 - Init COMPLETE\n", host, pid, pid+1, rank, nranks)
	}
	flush()
}

func runRanks(n, hang string) {
	k, _ := strconv.Atoi(n)
	var wg sync.WaitGroup
	for i := 0; i < k; i++ {
		acts := []string{"child", "sleep:" + strconv.Itoa(10*i) + "ms"}
		if strconv.Itoa(i) == hang {
			acts = append(acts, "start:"+strconv.Itoa(i)+":"+n, "hang")
		} else {
			acts = append(acts, "init:"+strconv.Itoa(i)+":"+n, "sleep:300ms")
		}
		c := exec.Command(os.Args[0], acts...)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Start(); err != nil {
			die("%v", err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Wait() }()
	}
	wg.Wait()
}

func writeRandom(w *bufio.Writer, n int64) {
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 64<<10)
	for n > 0 {
		_, _ = rng.Read(buf)
		k := min(int64(len(buf)), n)
		_, _ = w.Write(buf[:k])
		n -= k
	}
}

// writeLines writes n bytes of training-log-like lines with a NCCL INFO
// line now and then, from one prepared 1 MiB block, in large writes.
func writeLines(f *os.File, n int64, nccl bool) {
	block := LogBlock(nccl)
	for n > 0 {
		k := min(int64(len(block)), n)
		if _, err := f.Write(block[:k]); err != nil {
			return // a Go program dies of SIGPIPE on fds 1 and 2 before this
		}
		n -= k
	}
}

// LogBlock is 1 MiB of training-log text: step lines of ~90 bytes and,
// with nccl, an NCCL INFO line every 64 lines.
func LogBlock(nccl bool) []byte {
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		if nccl && i%64 == 63 {
			fmt.Fprintf(&b, "node-0:%d:%d [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n", 100, 200)
			continue
		}
		fmt.Fprintf(&b, "step %8d | loss %.5f | lr 3.00e-04 | tokens/s %9d | grad-norm %.3f\n", i, 2.0/float64(i+1), 1000+i, 0.5)
	}
	return []byte(b.String()[:1<<20])
}
