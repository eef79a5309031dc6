// Command healthcheck probes a kplane process's HTTP health endpoint and
// exits 0 when it answers 200, 1 otherwise. FROM-scratch images have no
// shell, curl or wget, so every image carries this static binary and the
// compose health checks run it:
//
//	healthcheck 6444                        # GET http://127.0.0.1:6444/readyz
//	healthcheck --path /healthz 10252       # another path
//	healthcheck http://host:10252/readyz    # a full URL
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit, so tests can drive it.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("path", "/readyz", "path probed when the target is a port or host:port")
	timeout := fs.Duration("timeout", 3*time.Second, "how long the probe may take")
	quiet := fs.Bool("quiet", false, "print nothing on success")
	fs.Usage = func() {
		say(stderr, "usage: healthcheck [--path /readyz] [--timeout 3s] PORT|HOST:PORT|URL\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	url, err := targetURL(fs.Arg(0), *path)
	if err != nil {
		say(stderr, "healthcheck: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := probe(ctx, url); err != nil {
		say(stderr, "healthcheck: %v\n", err)
		return 1
	}
	if !*quiet {
		say(stdout, "healthcheck: %s ok\n", url)
	}
	return 0
}

// say prints a line for whoever reads the probe's output. The exit code is
// the probe's answer; a line that cannot be written changes nothing about
// it, so the write error is ignored on purpose.
func say(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}

// targetURL turns "6444", "host:6444" or a full URL into the URL to GET.
func targetURL(target, path string) (string, error) {
	if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
		return target, nil
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if port, err := strconv.Atoi(target); err == nil {
		if port < 1 || port > 65535 {
			return "", fmt.Errorf("port %d out of range", port)
		}
		return "http://" + net.JoinHostPort("127.0.0.1", target) + path, nil
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return "", fmt.Errorf("target %q is not a port, host:port or URL: %w", target, err)
	}
	if host == "" {
		// ":6444", as in a --health-addr flag, means this host.
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// probe GETs url and fails unless the answer is 200.
func probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("build request for %s: %w", url, err)
	}
	// No proxy: the target is always this container or host, and a
	// proxy from the environment would only get in the way.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close() //nolint:errcheck // a response body is only read; closing it has nothing to report
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return errors.New("GET " + url + ": " + resp.Status + ": " + strings.TrimSpace(string(body)))
	}
	return nil
}
