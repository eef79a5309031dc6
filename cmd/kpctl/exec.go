package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/term"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// exec and port-forward go through the apiserver's Kubernetes REST
// subresources pods/exec and pods/portforward (the same path kubectl
// takes), with client-go's websocket clients: v5.channel.k8s.io for exec,
// SPDY/3.1+portforward.k8s.io over a websocket for port-forward. The
// apiserver relays the upgraded connection to the pod's node agent.

// exitCodeError ends kpctl with the remote command's exit code.
type exitCodeError struct{ code int }

func (e exitCodeError) Error() string {
	return fmt.Sprintf("command terminated with exit code %d", e.code)
}

// restConfig is the apiserver's REST endpoint as the global flags name it
// (the REST front end shares the gRPC listener).
func (g *globals) restConfig() (*rest.Config, error) {
	s, err := g.settings()
	if err != nil {
		return nil, err
	}
	token := s.token
	if s.tokenFile != "" {
		if token, err = readTokenFile(s.tokenFile); err != nil {
			return nil, err
		}
	}
	scheme := "http://"
	if s.secure {
		scheme = "https://"
	}
	return &rest.Config{
		Host:        scheme + s.server,
		BearerToken: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.tlsCA, CAData: s.caData,
			CertFile: s.cert, KeyFile: s.key, CertData: s.certData, KeyData: s.keyData},
		UserAgent: "kpctl",
	}, nil
}

// podURL is the URL of a pod subresource on the apiserver.
func podURL(cfg *rest.Config, ns, pod, sub string, q url.Values) (*url.URL, error) {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("apiserver address %q: %w", cfg.Host, err)
	}
	u.Path = "/api/v1/namespaces/" + url.PathEscape(ns) + "/pods/" + url.PathEscape(pod) + "/" + sub
	u.RawQuery = q.Encode()
	return u, nil
}

func podName(arg string) string {
	return strings.TrimPrefix(strings.TrimPrefix(arg, "pod/"), "pods/")
}

var execCommand = &command{
	name:    "exec",
	usage:   "POD [-c CONTAINER] [-i] [-t] -- COMMAND [ARGS...]",
	summary: "Run a command beside a container of a pod",
	example: `  kpctl exec web-7d9f -- ls -l

  # Feed standard input to the command
  echo hello | kpctl exec -i web-7d9f -c server -- cat

  # An interactive shell
  kpctl exec -it web-7d9f -- sh`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		var container string
		var stdin, tty bool
		fs.stringFlag(&container, "container", "c", "", "the container (default: the pod's only container)")
		fs.boolFlag(&stdin, "stdin", "i", false, "pass standard input to the command")
		fs.boolFlag(&tty, "tty", "t", false, "run the command on a terminal (with -i from a terminal: raw mode, window size followed)")
		return func(ctx context.Context, e *env, args []string) error {
			if fs.dash != 1 || len(args) < 2 {
				return errors.New("expected a pod name, then the command after --: kpctl exec POD [-c CONTAINER] [-i] [-t] -- COMMAND [ARGS...]")
			}
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			q := url.Values{"command": args[1:], "stdout": {"true"}, "stderr": {"true"}}
			if container != "" {
				q.Set("container", container)
			}
			opts := remotecommand.StreamOptions{Stdout: e.stdout, Stderr: e.stderr}
			if stdin {
				q.Set("stdin", "true")
				opts.Stdin = e.stdin
			}
			if tty {
				// A terminal has one output stream.
				q.Set("tty", "true")
				q.Set("stderr", "false")
				opts.Tty, opts.Stderr = true, nil
				restore, sizes, err := localTerminal(e.stdin, stdin)
				if err != nil {
					return err
				}
				defer restore()
				opts.TerminalSizeQueue = sizes
			}
			u, err := podURL(cfg, g.ns(), podName(args[0]), "exec", q)
			if err != nil {
				return err
			}
			ex, err := remotecommand.NewWebSocketExecutor(cfg, "GET", u.String())
			if err != nil {
				return fmt.Errorf("exec: %w", err)
			}
			err = ex.StreamWithContext(ctx, opts)
			var ce utilexec.CodeExitError
			if errors.As(err, &ce) {
				return exitCodeError{code: ce.ExitStatus()}
			}
			if err != nil {
				return fmt.Errorf("exec %s: %w", podName(args[0]), err)
			}
			return nil
		}
	},
}

var portForwardCommand = &command{
	name:    "port-forward",
	usage:   "POD [LOCAL_PORT:]REMOTE_PORT [...]",
	summary: "Forward local ports to a pod",
	example: `  # Listen on localhost:8080, forward to port 80 of the pod
  kpctl port-forward web-7d9f 8080:80

  # A random local port
  kpctl port-forward web-7d9f :80`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		var addresses stringList
		fs.Var(&addresses, "address", "local address to listen on, repeatable (default localhost)")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) < 2 {
				return errors.New("expected a pod name and at least one port: kpctl port-forward POD [LOCAL_PORT:]REMOTE_PORT [...]")
			}
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			u, err := podURL(cfg, g.ns(), podName(args[0]), "portforward", nil)
			if err != nil {
				return err
			}
			dialer, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
			if err != nil {
				return fmt.Errorf("port-forward: %w", err)
			}
			if len(addresses) == 0 {
				addresses = stringList{"localhost"}
			}
			stop, returned := make(chan struct{}), make(chan struct{})
			defer close(returned)
			go func() {
				select {
				case <-ctx.Done():
					close(stop)
				case <-returned:
				}
			}()
			fw, err := portforward.NewOnAddresses(dialer, addresses, args[1:], stop, nil, e.stdout, e.stderr)
			if err != nil {
				return fmt.Errorf("port-forward: %w", err)
			}
			if err := fw.ForwardPorts(); err != nil {
				return fmt.Errorf("port-forward %s: %w", podName(args[0]), err)
			}
			return ctx.Err()
		}
	},
}

// localTerminal puts kpctl's terminal in raw mode when stdin is one and
// is passed on (keys go to the remote command as typed) and follows its
// window size. Without a terminal the command still gets one, unsized.
func localTerminal(in any, stdin bool) (restore func(), sizes remotecommand.TerminalSizeQueue, err error) {
	f, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}, nil, nil
	}
	fd := int(f.Fd())
	cooked := func() {}
	if stdin {
		old, err := term.MakeRaw(fd)
		if err != nil {
			return nil, nil, fmt.Errorf("terminal raw mode: %w", err)
		}
		cooked = func() { _ = term.Restore(fd, old) }
	}
	q := &windowSizes{fd: fd, winch: make(chan os.Signal, 1), first: true}
	signal.Notify(q.winch, syscall.SIGWINCH)
	return func() { signal.Stop(q.winch); close(q.winch); cooked() }, q, nil
}

// windowSizes is the local terminal's size, first at once, then after
// each SIGWINCH.
type windowSizes struct {
	fd    int
	winch chan os.Signal
	first bool
}

// Next implements remotecommand.TerminalSizeQueue; nil ends the stream.
func (q *windowSizes) Next() *remotecommand.TerminalSize {
	if !q.first {
		if _, ok := <-q.winch; !ok {
			return nil
		}
	}
	q.first = false
	w, h, err := term.GetSize(q.fd)
	if err != nil {
		return nil
	}
	return &remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)} //nolint:gosec // terminal sizes fit
}
