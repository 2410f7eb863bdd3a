// Package app is the rankgate command line: one file per subcommand, one
// exit point (Main), and Run for tests.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/rankgate/rankgate/verdict"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// Version is set at build time with -ldflags "-X .../app.Version=...".
var Version = "dev"

// Streams are the process's standard streams, swappable in tests.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// inputError is the exit for an input that could not be read or is
// wrong: 2, or 128+N when signal N cut the read short.
func inputError(ctx context.Context, err error) error {
	if exit, ok := interrupted(ctx, err); ok {
		return exit
	}
	return verdict.WithCode(verdict.ExitUsage, err)
}

// Main runs rankgate with the process's arguments and exits. SIGINT and
// SIGTERM end the command (see interrupts).
func Main() {
	ctx, cancel := context.WithCancel(context.Background())
	h := &interrupts{cancel: cancel, exit: os.Exit, stderr: os.Stderr}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go h.watch(sigs)
	code := runAs(context.WithValue(ctx, interruptsKey{}, h), displayName(os.Args[0]), Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}, os.Args[1:])
	signal.Stop(sigs)
	os.Exit(code)
}

// Run executes one rankgate command line and returns its exit code.
func Run(ctx context.Context, streams Streams, args []string) int {
	return runAs(ctx, "rankgate", streams, args)
}

// pluginName is the binary's name as a kubectl plugin: kubectl finds
// kubectl-rankgate on the PATH (krew installs it so) and runs it for
// 'kubectl rankgate ...'.
const pluginName = "kubectl-rankgate"

// displayName is how help and usage errors name the command: "kubectl
// rankgate" when the binary runs as the kubectl plugin, else "rankgate".
func displayName(argv0 string) string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	if base == pluginName {
		return "kubectl rankgate"
	}
	return "rankgate"
}

// runAs is Run with the name help and usage errors show.
func runAs(ctx context.Context, name string, streams Streams, args []string) int {
	a := &App{Streams: streams, Log: zap.NewNop()}
	root := a.newRootCommand()
	if name != root.Name() {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: name}
	}
	markCommandErrors(root)
	root.SetArgs(args)
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.Err)
	err := root.ExecuteContext(ctx)
	var ce commandError
	if errors.As(err, &ce) {
		err = ce.err
		if msg := verdict.Message(err); msg != "" {
			fmt.Fprintf(streams.Err, "rankgate: %s\n", msg)
		}
	} else if err != nil {
		// Cobra's own errors: unknown flags, wrong argument counts.
		fmt.Fprintf(streams.Err, "rankgate: %v\nRun '%s --help' for usage.\n", err, failedCommandPath(root, args))
		err = verdict.WithCode(verdict.ExitUsage, err)
	}
	return verdict.Code(err)
}

// failedCommandPath is the command a command line names ("rankgate
// status"), for the usage hint; the root when none is found.
func failedCommandPath(root *cobra.Command, args []string) string {
	c, _, err := root.Find(args)
	if err != nil || c == nil {
		return root.CommandPath()
	}
	return c.CommandPath()
}

// commandError marks an error that a command returned, as opposed to
// cobra's own (flag and argument parsing).
type commandError struct{ err error }

func (e commandError) Error() string { return e.err.Error() }
func (e commandError) Unwrap() error { return e.err }

// markCommandErrors wraps the run functions of c and its subcommands so
// that their errors are told from cobra's.
func markCommandErrors(c *cobra.Command) {
	mark := func(f func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
		if f == nil {
			return nil
		}
		return func(cmd *cobra.Command, args []string) error {
			if err := f(cmd, args); err != nil {
				return commandError{err}
			}
			return nil
		}
	}
	c.RunE = mark(c.RunE)
	c.PersistentPreRunE = mark(c.PersistentPreRunE)
	for _, sub := range c.Commands() {
		markCommandErrors(sub)
	}
}

// App is the state shared by subcommands: streams, logger and loaded config.
type App struct {
	Streams Streams
	Log     *zap.Logger
	Config  *Config
	root    rootOptions
}

// clientVerbosity passes -v on to the Kubernetes client libraries, whose
// request logs kubectl users know from -v 6 to 9 (the full build sets it;
// the node build talks to no API server).
var clientVerbosity = func(int) error { return nil }

// rootOptions are the global flags.
type rootOptions struct {
	ConfigFile string
	LogLevel   string
	LogFormat  string
	// Verbosity is kubectl's -v: 0 keeps the default level, 1 to 3 log
	// at info, 4 and above at debug.
	Verbosity int
}

// Defaults of the global flags whose flag default is empty ("not given":
// the controller logs at info unless told).
const (
	defaultLogLevel  = "warn"
	defaultLogFormat = "console"
)

func (a *App) newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rankgate",
		Short: "Prove that every rank of a distributed GPU job can work with the others",
		Long: `rankgate checks, before a PyTorchJob or MPIJob starts training, that every
rank's GPU or MIG device can work with the others, and fails fast with a
reason a person can act on.`,
		Version:       currentVersion().Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := LoadConfig(cmd, a.root.ConfigFile)
			if err != nil {
				return inputError(cmd.Context(), err)
			}
			a.Config = cfg
			log, err := newLogger(a.Streams.Err, a.logLevel(defaultLogLevel), a.logFormat())
			if err != nil {
				return verdict.WithCode(verdict.ExitUsage, err)
			}
			a.Log = log
			if a.root.Verbosity > 0 {
				if err := clientVerbosity(a.root.Verbosity); err != nil {
					return verdict.Exitf(verdict.ExitUsage, "-v %d: %v", a.root.Verbosity, err)
				}
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.root.ConfigFile, "config", "", "config file (YAML, apiVersion rankgate.io/v1, kind Config); env RANKGATE_CONFIG")
	pf.StringVar(&a.root.LogLevel, "log-level", "", "log level: debug, info, warn, error (default "+defaultLogLevel+")")
	pf.IntVarP(&a.root.Verbosity, "v", "v", 0, "log verbosity as kubectl's -v: 1-3 info, 4 and above debug (--log-level wins); 6 and above also the API requests")
	pf.StringVar(&a.root.LogFormat, "log-format", "", "log format: console or json (default "+defaultLogFormat+")")
	root.AddCommand(a.commands()...)
	registerCompletions(root)
	return root
}

// logLevel is the level given by flag, file or environment, else the one
// -v asks for, else def.
func (a *App) logLevel(def string) string {
	switch {
	case a.root.LogLevel != "":
		return a.root.LogLevel
	case a.root.Verbosity >= 4:
		return "debug"
	case a.root.Verbosity >= 1 && def != "debug":
		return "info"
	}
	return def
}

func (a *App) logFormat() string {
	if a.root.LogFormat == "" {
		return defaultLogFormat
	}
	return a.root.LogFormat
}
