// Command kpctl is the command-line client of kplane, modelled on kubectl:
// apply, create, get, describe, delete, scale, label and annotate objects
// through the apiserver's gRPC API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{
		stdin:  os.Stdin,
		stdout: newOutput(os.Stdout),
		stderr: newOutput(os.Stderr),
		getenv: os.Getenv,
		now:    time.Now,
	})
	stop()
	os.Exit(code)
}

// env is everything a command touches outside its arguments, so tests can
// run commands in-process with captured output and a fixed clock.
type env struct {
	stdin io.Reader
	// stdout and stderr keep their first write error: run fails when
	// stdout lost output, however the command ended.
	stdout, stderr *output
	getenv         func(string) string
	now            func() time.Time
}

// command is one kpctl subcommand.
type command struct {
	name    string
	usage   string // arguments after the command name
	summary string
	example string
	// setup registers the command's own flags and returns its body.
	setup func(fs *flagSet, g *globals) func(ctx context.Context, e *env, args []string) error
}

var commands = []*command{
	applyCommand, createCommand, getCommand, describeCommand, deleteCommand,
	scaleCommand, labelCommand, annotateCommand, apiResourcesCommand,
	logsCommand, waitCommand, execCommand, portForwardCommand,
	cordonCommand, uncordonCommand,
	rolloutCommand, setCommand, authCommand, certsCommand, adminCommand,
}

// errSilent makes run exit non-zero after the command already reported
// its errors (e.g. one line per failed document).
var errSilent = errors.New("errors were reported")

// run executes one kpctl invocation and returns the exit code. Errors are
// printed as one "error: ..." line on stderr.
func run(ctx context.Context, args []string, e *env) (code int) {
	defer func() {
		// A bug must still end in one error line, not a stack trace.
		if r := recover(); r != nil {
			code = fail(e, fmt.Errorf("internal error: %v", r))
		}
	}()
	code = dispatch(ctx, args, e)
	if err := e.stdout.err; err != nil && code == 0 {
		// The command did its work, but what it printed did not all
		// arrive (a closed pipe, a full disk): a script reading it must
		// not take the partial output for the whole.
		code = fail(e, fmt.Errorf("writing output: %w", err))
	}
	return code
}

// dispatch parses the global flags and the command's, and runs it.
func dispatch(ctx context.Context, args []string, e *env) int {
	g := newGlobals(e.getenv)
	root := newFlagSet("kpctl")
	g.register(root)
	rest, err := root.parseInterspersed(args, true)
	if errors.Is(err, errHelp) || (err == nil && len(rest) == 0) {
		printRootHelp(e.stdout, root)
		return 0
	}
	if err != nil {
		return fail(e, fmt.Errorf("%w (see 'kpctl --help')", err))
	}
	name, cmdArgs := rest[0], rest[1:]
	if name == "help" {
		if len(cmdArgs) == 0 {
			printRootHelp(e.stdout, root)
			return 0
		}
		name, cmdArgs = cmdArgs[0], []string{"--help"}
	}
	cmd := lookupCommand(name)
	if cmd == nil {
		return fail(e, fmt.Errorf("unknown command %q for \"kpctl\" (see 'kpctl --help' for the list of commands)", name))
	}
	fs := newFlagSet("kpctl " + cmd.name)
	body := cmd.setup(fs, g)
	g.register(fs)
	pos, err := fs.parseInterspersed(cmdArgs, false)
	if errors.Is(err, errHelp) {
		printCommandHelp(e.stdout, cmd, fs)
		return 0
	}
	if err != nil {
		return fail(e, fmt.Errorf("%w (see 'kpctl %s --help')", err, cmd.name))
	}
	if err := body(ctx, e, pos); err != nil {
		if werr := e.stdout.err; werr != nil && errors.Is(err, werr) {
			// The command stopped because stdout failed: say so in the
			// same words as when it finished first (see run).
			return fail(e, fmt.Errorf("writing output: %w", werr))
		}
		if errors.Is(err, errSilent) {
			return 1
		}
		var ec exitCodeError
		if errors.As(err, &ec) {
			// As kubectl: the remote command's code is kpctl's.
			e.stderr.printf("%s\n", ec)
			return ec.code
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return 130 // interrupted, as a shell reports SIGINT
		}
		return fail(e, err)
	}
	return 0
}

// fail reports err on stderr and returns exit code 1. A failed write to
// stderr has nowhere to be reported; the exit code still says it failed.
func fail(e *env, err error) int {
	e.stderr.printf("error: %s\n", err)
	return 1
}

func lookupCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// printRootHelp prints kpctl's help; a failed write sticks in w.
func printRootHelp(w *output, root *flagSet) {
	w.print(`kpctl controls a kplane cluster, the way kubectl controls Kubernetes.

Usage:
  kpctl [global flags] COMMAND [flags] [args]

Commands:
`)
	tw := newColumns(w)
	for _, c := range commands {
		tw.printf("  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.flush() // the error is w's, which keeps it
	w.print(`
Kinds may be named in singular, plural or short form (po, rs, rc, svc, ep,
no, pv, pvc, sa, ns, sc, ev); see 'kpctl api-resources'.

Global flags (accepted by every command):
`)
	root.printDefaults(w)
	w.print("\nRun 'kpctl COMMAND --help' for a command's flags and examples.\n")
}

// printCommandHelp prints one command's help; a failed write sticks in w.
func printCommandHelp(w *output, c *command, fs *flagSet) {
	w.printf("%s\n\nUsage:\n  kpctl %s %s [flags]\n", c.summary, c.name, c.usage)
	if c.example != "" {
		w.printf("\nExamples:\n%s\n", strings.TrimRight(c.example, "\n"))
	}
	w.print("\nFlags:\n")
	fs.printDefaults(w)
}
