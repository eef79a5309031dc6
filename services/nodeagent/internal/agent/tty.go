package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// openPty allocates a pseudo-terminal pair: the agent keeps the master,
// the command gets the slave as its controlling terminal.
func openPty() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := control(m, func(fd int) error { return unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0) }); err != nil {
		_ = m.Close()
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	var n uint32
	if err := control(m, func(fd int) (err error) {
		n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN)
		return err
	}); err != nil {
		_ = m.Close()
		return nil, nil, fmt.Errorf("pty number: %w", err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	s, err := os.OpenFile(name, os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		_ = m.Close()
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	return m, s, nil
}

// control runs f on the file's descriptor without taking it out of the
// runtime's poller (File.Fd would make it blocking, and Close could then
// not interrupt a read).
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// terminalSize is one message of the resize channel.
type terminalSize struct {
	Width, Height uint16
}

// startTTY starts cmd on a new terminal: stdin from in (when not nil)
// typed into it, everything the command prints to out, window sizes from
// resize applied as they come. It returns a wait that ends once the
// command exited and its output was copied (bounded by execWaitDelay when
// a background child keeps the terminal open).
func startTTY(ctx context.Context, cmd *exec.Cmd, in io.Reader, out io.Writer, resize io.Reader) (func() error, error) {
	master, slave, err := openPty()
	if err != nil {
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// A session of its own with the terminal as its controlling terminal,
	// so the shell gets job control and ^C reaches the foreground job.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		_ = master.Close()
		_ = slave.Close()
		return nil, err
	}
	_ = slave.Close() // the child holds it now
	go func() {
		dec := json.NewDecoder(resize)
		for ctx.Err() == nil {
			var size terminalSize
			if err := dec.Decode(&size); err != nil {
				return
			}
			_ = control(master, func(fd int) error {
				return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
			})
		}
	}()
	if in != nil {
		go func() { _, _ = io.Copy(master, in) }()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		// Ends with EIO once no process holds the terminal any more.
		_, _ = io.Copy(out, master)
	}()
	return func() error {
		err := cmd.Wait()
		select {
		case <-copied:
		case <-time.After(execWaitDelay):
		}
		_ = master.Close()
		return err
	}, nil
}
