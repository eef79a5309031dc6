package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/test/e2e/internal/launcher"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// httpGetBody fetches url (the forwarder listens once it printed its
// "Forwarding from" line) and returns the body of a 200 answer.
func httpGetBody(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second}
	resp, err := client.Get(url) //nolint:noctx // bounded by the client's timeout
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d, body %q, read error %v", url, resp.StatusCode, b, err)
	}
	return string(b)
}

// exitCode is the exit status of a finished command (-1: did not run).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestExecAndPortForward runs commands beside a running container and
// forwards a local port to it, with kpctl and with the real kubectl, both
// through the apiserver's pods/exec and pods/portforward to the node agent.
func TestExecAndPortForward(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	c := newNACluster(t, false, "ex-1")
	port := 9500 + os.Getpid()%400
	created := c.create("web", "ex-1", "Always", func(ctr *kplanev1.Container) {
		ctr.Env = []*kplanev1.EnvVar{{Name: "GREETING", Value: "from-the-pod"}}
		// Ready once the server listens: port-forward needs it.
		ctr.ReadinessProbe = &kplanev1.Probe{TcpSocket: &kplanev1.TCPSocketAction{Port: kplanev1.IntOrStringFromInt32(int32(port))}, PeriodSeconds: 1}
	}, "sh", "-c", fmt.Sprintf(`echo served > index.html; exec python3 -u -m http.server %d --bind "$KPLANE_POD_IP"`, port))
	c.waitPod("web", "ready", func(p *kplanev1.Pod) bool {
		cs := p.GetStatus().GetContainerStatuses()
		return len(cs) == 1 && cs[0].GetReady()
	})
	k := newKubectl(t, c.cfg)
	kpctl := func(stdin string, args ...string) (string, string, int) {
		cmd := c.cfg.kpctl(args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		err := cmd.Run()
		return out.String(), errb.String(), exitCode(err)
	}

	t.Run("kpctl exec returns output and exit code", func(t *testing.T) {
		out, errs, code := kpctl("", "exec", "web", "--", "sh", "-c", `echo "$GREETING"; pwd; echo oops >&2`)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errs)
		}
		dir := filepath.Join(c.podDir(created), "main")
		if want := "from-the-pod\n" + dir + "\n"; out != want {
			t.Errorf("stdout %q, want %q (the container's env and dir)", out, want)
		}
		if errs != "oops\n" {
			t.Errorf("stderr %q, want %q", errs, "oops\n")
		}
		out, errs, code = kpctl("", "exec", "web", "-c", "main", "--", "sh", "-c", "echo partial; exit 7")
		if code != 7 || out != "partial\n" || !strings.Contains(errs, "command terminated with exit code 7") {
			t.Errorf("exit 7: got code %d, stdout %q, stderr %q", code, out, errs)
		}
	})

	t.Run("kpctl exec -i passes stdin", func(t *testing.T) {
		out, errs, code := kpctl("line one\nline two\n", "exec", "-i", "web", "--", "sh", "-c", "tr a-z A-Z; echo done")
		if code != 0 || out != "LINE ONE\nLINE TWO\ndone\n" {
			t.Errorf("got code %d, stdout %q, stderr %q", code, out, errs)
		}
	})

	t.Run("kpctl exec -t runs on a terminal", func(t *testing.T) {
		out, errs, code := kpctl("", "exec", "-t", "web", "--", "sh", "-c", "test -t 0 && test -t 1 && echo on-a-tty; exit 4")
		if code != 4 || out != "on-a-tty\r\n" {
			t.Errorf("got code %d, stdout %q, stderr %q", code, out, errs)
		}
	})

	// From a real terminal (util-linux script gives the client one, 30x90):
	// raw mode, the window size sent on the resize channel, a shell on the
	// remote terminal. The remote command polls for the size, which may
	// arrive just after it started.
	sizeCmd := `for i in $(seq 100); do s=$(stty size); [ "$s" = "30 90" ] && break; sleep 0.05; done; echo "size=$s"; test -t 0 && echo remote-tty`
	onTerminal := func(t *testing.T, client string) string {
		t.Helper()
		if _, err := exec.LookPath("script"); err != nil {
			t.Skip("script (util-linux) is not installed")
		}
		cmd := exec.Command("script", "-qec", "stty rows 30 cols 90; "+client, "/dev/null")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+k.kubeconfig, "HOME="+k.dir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", client, err, out)
		}
		return string(out)
	}
	t.Run("kpctl exec -it from a terminal", func(t *testing.T) {
		out := onTerminal(t, fmt.Sprintf("%s exec -it web -- sh -c '%s'", c.cfg.kpctlLine(), sizeCmd))
		if !strings.Contains(out, "size=30 90") || !strings.Contains(out, "remote-tty") {
			t.Errorf("output %q: want the terminal's size and a remote terminal", out)
		}
	})
	t.Run("kubectl exec -it from a terminal", func(t *testing.T) {
		out := onTerminal(t, fmt.Sprintf("%s exec -it web -- sh -c '%s'", k.bin, sizeCmd))
		if !strings.Contains(out, "size=30 90") || !strings.Contains(out, "remote-tty") {
			t.Errorf("output %q: want the terminal's size and a remote terminal", out)
		}
	})

	t.Run("kpctl exec failures name the cause", func(t *testing.T) {
		_, errs, code := kpctl("", "exec", "missing", "--", "true")
		if code == 0 || !strings.Contains(errs, `pods "missing" not found`) {
			t.Errorf("missing pod: code %d, stderr %q", code, errs)
		}
		_, errs, code = kpctl("", "exec", "web", "-c", "nope", "--", "true")
		if code == 0 || !strings.Contains(errs, "container nope is not valid for pod web") {
			t.Errorf("bad container: code %d, stderr %q", code, errs)
		}
		_, errs, code = kpctl("", "exec", "web", "--", "/does/not/exist")
		if code == 0 || !strings.Contains(errs, "/does/not/exist") {
			t.Errorf("bad command: code %d, stderr %q", code, errs)
		}
		_, errs, code = kpctl("", "exec", "web", "true")
		if code == 0 || !strings.Contains(errs, "the command after --") {
			t.Errorf("no --: code %d, stderr %q", code, errs)
		}
	})

	t.Run("kpctl port-forward carries HTTP", func(t *testing.T) {
		local, err := launcher.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		lp := local[strings.LastIndex(local, ":")+1:]
		w := startLines(t, c.cfg.kpctl("port-forward", "web", lp+":"+strconv.Itoa(port)))
		w.waitPrefix("Forwarding from 127.0.0.1:" + lp)
		for i := 0; i < 3; i++ { // one stream pair per connection
			if body := httpGetBody(t, "http://127.0.0.1:"+lp+"/index.html"); body != "served\n" {
				t.Fatalf("body %q, want %q", body, "served\n")
			}
		}
	})

	t.Run("kubectl exec", func(t *testing.T) {
		out, errs, err := k.run(nil, "exec", "web", "--", "sh", "-c", "echo hi; exit 3")
		if exitCode(err) != 3 || out != "hi\n" {
			t.Errorf("kubectl exec: exit %d (%v), stdout %q, stderr %q", exitCode(err), err, out, errs)
		}
		cmd := k.cmd(nil, "exec", "-i", "web", "--", "cat")
		cmd.Stdin = strings.NewReader("through kubectl\n")
		b, err := cmd.Output()
		if err != nil || string(b) != "through kubectl\n" {
			t.Errorf("kubectl exec -i: %v, stdout %q", err, b)
		}
	})

	t.Run("kubectl port-forward", func(t *testing.T) {
		local, err := launcher.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		lp := local[strings.LastIndex(local, ":")+1:]
		w := startLines(t, k.cmd(nil, "port-forward", "pod/web", lp+":"+strconv.Itoa(port)))
		w.waitPrefix("Forwarding from 127.0.0.1:" + lp)
		if body := httpGetBody(t, "http://127.0.0.1:"+lp+"/index.html"); body != "served\n" {
			t.Fatalf("body %q, want %q", body, "served\n")
		}
	})
}
