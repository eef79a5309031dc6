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
	"text/tabwriter"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], &env{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
		now:    time.Now,
	})
	stop()
	os.Exit(code)
}

// env is everything a command touches outside its arguments, so tests can
// run commands in-process with captured output and a fixed clock.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
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
	logsCommand, waitCommand,
	cordonCommand, uncordonCommand,
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
		if errors.Is(err, errSilent) {
			return 1
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return 130 // interrupted, as a shell reports SIGINT
		}
		return fail(e, err)
	}
	return 0
}

func fail(e *env, err error) int {
	fmt.Fprintf(e.stderr, "error: %s\n", err)
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

func printRootHelp(w io.Writer, root *flagSet) {
	fmt.Fprint(w, `kpctl controls a kplane cluster, the way kubectl controls Kubernetes.

Usage:
  kpctl [global flags] COMMAND [flags] [args]

Commands:
`)
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
Kinds may be named in singular, plural or short form (po, rs, rc, svc, ep,
no, pv, pvc, sa, ns, sc, ev); see 'kpctl api-resources'.

Global flags (accepted by every command):
`)
	root.printDefaults(w)
	fmt.Fprint(w, "\nRun 'kpctl COMMAND --help' for a command's flags and examples.\n")
}

func printCommandHelp(w io.Writer, c *command, fs *flagSet) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  kpctl %s %s [flags]\n", c.summary, c.name, c.usage)
	if c.example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", strings.TrimRight(c.example, "\n"))
	}
	fmt.Fprint(w, "\nFlags:\n")
	fs.printDefaults(w)
}
