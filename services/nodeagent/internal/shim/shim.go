// Package shim is the tiny supervisor the exec runtime puts between the
// node agent and each container process. The agent re-executes its own
// binary as
//
//	nodeagent shim --exit-file F --pid-file P --log-file L [--times-file T] --dir D -- cmd args...
//
// in a new process group. The shim starts the container (stdout and
// stderr appended to L, working directory D, the shim's environment),
// with --times-file through a pipe the shim copies to L, appending to T
// the offset and time of every line start (lines.go), so the node agent
// can serve sinceTime, sinceSeconds and timestamps;
// writes P, waits, and writes F with the exit status. Because the shim, not
// the agent, is the container's parent and records the exit status on
// disk, an agent that is killed and restarted re-adopts running containers
// and learns the exact exit codes of those that ended while it was down.
//
// The shim ignores SIGTERM, SIGINT and SIGHUP (the container, in the same
// process group, receives them and decides); a SIGKILL of the group ends
// both, and then no exit file is written, which the agent reads as "killed".
package shim

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// Command is the first argument that selects shim mode in the agent binary.
const Command = "shim"

// StartErrorCode is the exit code recorded when the command could not be
// started at all (as container runtimes report a StartError).
const StartErrorCode = 128

// PidInfo is the content of the pid file.
type PidInfo struct {
	// ShimPid is the shim's pid, also the process group id of the container.
	ShimPid int `json:"shimPid"`
	// Pid is the container process's pid.
	Pid int `json:"pid"`
	// StartedAt is when the container process started.
	StartedAt time.Time `json:"startedAt"`
}

// ExitInfo is the content of the exit file.
type ExitInfo struct {
	ExitCode   int       `json:"exitCode"`
	Signal     int       `json:"signal,omitempty"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
	// StartError is true when the command never ran.
	StartError bool `json:"startError,omitempty"`
}

// Main runs the shim with args (those after "shim") and returns the
// process exit code: 0 once the exit file is written, 2 for bad arguments,
// 1 when the exit status could not be recorded.
func Main(args []string) int {
	fs := flag.NewFlagSet("nodeagent shim", flag.ContinueOnError)
	exitFile := fs.String("exit-file", "", "file to write the container's exit status to (required)")
	pidFile := fs.String("pid-file", "", "file to write the container's pid to (required)")
	logFile := fs.String("log-file", "", "file the container's stdout and stderr are appended to (required)")
	timesFile := fs.String("times-file", "", "file the offset and time of every line start of the log are appended to (optional)")
	dir := fs.String("dir", "", "working directory of the container")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cmdArgs := fs.Args()
	if *exitFile == "" || *pidFile == "" || *logFile == "" || len(cmdArgs) == 0 {
		fmt.Fprintln(os.Stderr, "nodeagent shim: --exit-file, --pid-file, --log-file and a command after -- are required")
		return 2
	}
	// Caught (not ignored) so that the container, after exec, gets the
	// default dispositions back.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	info := run(cmdArgs, *dir, *logFile, *timesFile, *pidFile)
	if err := writeJSON(*exitFile, info); err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent shim: %v\n", err)
		return 1
	}
	return 0
}

func run(cmdArgs []string, dir, logPath, timesPath, pidPath string) ExitInfo {
	start := time.Now()
	fail := func(err error) ExitInfo {
		return ExitInfo{ExitCode: StartErrorCode, Message: err.Error(), StartedAt: start, FinishedAt: time.Now(), StartError: true}
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(fmt.Errorf("open log: %w", err))
	}
	// The container writes through its own descriptor (or the pipe); the
	// shim's two notes below are best effort, as the exit file carries
	// the error.
	defer func() { _ = logf.Close() }()
	var out io.Writer = logf
	var lt *lineTimer
	if timesPath != "" {
		timesf, err := os.OpenFile(timesPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fail(fmt.Errorf("open times file: %w", err))
		}
		defer func() { _ = timesf.Close() }()
		if lt, err = newLineTimer(logf, timesf); err != nil {
			return fail(err)
		}
		out = lt
	}
	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Dir = dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	var pr *os.File
	if lt != nil {
		var pw *os.File
		if pr, pw, err = os.Pipe(); err != nil {
			return fail(fmt.Errorf("create the output pipe: %w", err))
		}
		// An *os.File, so Wait does not wait for the copy: a background
		// child holding the pipe cannot delay the exit record past
		// drainBound.
		cmd.Stdout, cmd.Stderr = pw, pw
		defer func() { _ = pr.Close() }()
		defer func() { _ = pw.Close() }()
	}
	if err := cmd.Start(); err != nil {
		_, _ = fmt.Fprintf(out, "failed to start container: %v\n", err)
		return fail(fmt.Errorf("start %s: %w", cmdArgs[0], err))
	}
	start = time.Now()
	copied := make(chan error, 1)
	if lt != nil {
		// The shim's copy of the write end goes, so the pipe ends when
		// the container's (and its children's) do.
		_ = cmd.Stdout.(*os.File).Close()
		go func() { copied <- copyLines(lt, pr) }()
	}
	if err := writeJSON(pidPath, PidInfo{ShimPid: os.Getpid(), Pid: cmd.Process.Pid, StartedAt: start}); err != nil {
		_, _ = fmt.Fprintf(out, "failed to record pid: %v\n", err)
	}
	werr := cmd.Wait()
	finished := time.Now()
	if lt != nil {
		_ = pr.SetReadDeadline(time.Now().Add(drainBound))
		if err := <-copied; err != nil {
			_, _ = fmt.Fprintf(os.Stderr, "nodeagent shim: %v\n", err)
		}
	}
	info := ExitInfo{StartedAt: start, FinishedAt: finished}
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		ws, ok := ee.Sys().(syscall.WaitStatus)
		switch {
		case ok && ws.Signaled():
			info.Signal = int(ws.Signal())
			info.ExitCode = 128 + info.Signal
			info.Message = "killed by signal " + ws.Signal().String()
		default:
			info.ExitCode = ee.ExitCode()
		}
	default:
		info.ExitCode = StartErrorCode
		info.Message = werr.Error()
	}
	return info
}

// writeJSON writes v to path atomically (temp file and rename), so a
// reader never sees half a file.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadPid reads a pid file.
func ReadPid(path string) (PidInfo, error) {
	var p PidInfo
	return p, readJSON(path, &p)
}

// ReadExit reads an exit file.
func ReadExit(path string) (ExitInfo, error) {
	var e ExitInfo
	return e, readJSON(path, &e)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err // callers test os.ErrNotExist
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
