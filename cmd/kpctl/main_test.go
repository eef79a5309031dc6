package main

import (
	"context"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/pkg/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// result is what one kpctl invocation produced.
type result struct {
	stdout, stderr string
	code           int
}

// kpctl runs the command in-process against server, the way main does.
func kpctl(ctx context.Context, server, stdin string, args ...string) result {
	var out, errOut testutil.SyncBuffer
	code := runWith(ctx, server, stdin, &out, &errOut, args...)
	return result{out.String(), errOut.String(), code}
}

func runWith(ctx context.Context, server, stdin string, out, errOut *testutil.SyncBuffer, args ...string) int {
	return run(ctx, args, &env{
		stdin:  strings.NewReader(stdin),
		stdout: newOutput(out),
		stderr: newOutput(errOut),
		getenv: func(k string) string {
			if k == "KPLANE_SERVER" {
				return server
			}
			return ""
		},
		now: time.Now,
	})
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), got, *update)
}

// unreachable is an address nothing listens on: commands that must fail
// before contacting the apiserver are run against it.
const unreachable = "127.0.0.1:1"

// TestBadManifestErrors checks the one-line error of each bad manifest in
// testdata/bad against a golden file; validation happens before any
// connection, so no apiserver is needed.
func TestBadManifestErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad manifests: %v", err)
	}
	var all strings.Builder
	for _, f := range files {
		r := kpctl(context.Background(), unreachable, "", "apply", "-f", f)
		if r.code != 1 || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q; want exit 1 and no output", f, r.code, r.stdout)
		}
		if !strings.HasPrefix(r.stderr, "error: "+f+": document ") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: want one error line naming the file and document, got %q", f, r.stderr)
		}
		all.WriteString(r.stderr)
	}
	golden(t, "bad-manifests.golden", all.String())
}

func TestNamespaceMismatch(t *testing.T) {
	r := kpctl(context.Background(), unreachable, "kind: Namespace\nmetadata: {name: a}\n---\nkind: Pod\nmetadata: {name: p, namespace: prod}\nspec: {containers: [{name: c, image: busybox}]}\n",
		"apply", "-f", "-", "-n", "dev")
	want := `error: STDIN: document 2: the namespace from the provided object "prod" does not match the namespace "dev"; pass --namespace=prod to use it` + "\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("got exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}

func TestDryRunValidatesExamples(t *testing.T) {
	r := kpctl(context.Background(), unreachable, "", "apply", "-f", "../../examples", "--dry-run=client")
	if r.code != 0 {
		t.Fatalf("examples do not validate: %s", r.stderr)
	}
	if n := strings.Count(r.stdout, "valid (dry run)"); n < 15 {
		t.Errorf("%d objects validated, want one per example:\n%s", n, r.stdout)
	}
}

func TestUsageErrors(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, `error: unknown command "frobnicate" for "kpctl"`},
		{[]string{"get"}, "error: you must specify the type of resource, one of: clusterrolebindings, clusterroles, controllerrevisions, cronjobs (cj), daemonsets (ds), deployments (deploy),"},
		{[]string{"get", "horizontalpodautoscalers"}, `error: the server doesn't have a resource type "horizontalpodautoscalers"; known types:`},
		{[]string{"get", "pods", "-o", "table"}, `error: unable to match a printer suitable for the output format "table"`},
		{[]string{"get", "pods", "--bogus"}, "error: flag provided but not defined: -bogus (see 'kpctl get --help')\n"},
		{[]string{"apply"}, "error: must specify -f FILENAME, -f DIR or -f - (stdin)"},
		{[]string{"apply", "-f", "testdata/none.yaml"}, `error: the path "testdata/none.yaml" does not exist`},
		{[]string{"delete", "pods"}, "error: resource(s) were provided, but no name was specified"},
		{[]string{"delete", "rs", "x", "--cascade=sometimes"}, `error: invalid --cascade "sometimes"`},
		{[]string{"scale", "rs", "x"}, "error: the --replicas=N flag is required"},
		{[]string{"scale", "pods", "x", "--replicas=2"}, "error: cannot scale pods: only deployments, replicasets, replicationcontrollers and statefulsets can be scaled"},
		{[]string{"rollout", "status"}, "error: rollout needs a subcommand"},
		{[]string{"rollout", "spin", "deploy/x"}, `error: unknown rollout subcommand "spin"`},
		{[]string{"set", "image", "deploy/x", "web"}, `error: invalid image assignment "web": want CONTAINER=IMAGE`},
		{[]string{"label", "pods", "x"}, "error: at least one KEY=VALUE or KEY- argument is required"},
		{[]string{"get", "pod/"}, "error: there is no need to specify a resource type"},
		{[]string{"--request-timeout=soon", "get", "pods"}, `error: invalid --request-timeout "soon"`},
	} {
		r := kpctl(ctx, unreachable, "", c.args...)
		if r.code == 0 || !strings.HasPrefix(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("kpctl %v: exit %d, stderr %q; want one line starting with %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

func TestUnreachableServer(t *testing.T) {
	r := kpctl(context.Background(), unreachable, "", "get", "pods", "--request-timeout=2s")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "error: Unavailable: apiserver 127.0.0.1:1: ") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want one Unavailable line naming the server", r.code, r.stderr)
	}
}

func TestHelp(t *testing.T) {
	ctx := context.Background()
	r := kpctl(ctx, unreachable, "", "--help")
	if r.code != 0 {
		t.Fatalf("kpctl --help exit %d: %s", r.code, r.stderr)
	}
	for _, c := range commands {
		if !strings.Contains(r.stdout, "  "+c.name+" ") {
			t.Errorf("kpctl --help does not list %s", c.name)
		}
		h := kpctl(ctx, unreachable, "", c.name, "--help")
		if h.code != 0 || !strings.Contains(h.stdout, "Usage:\n  kpctl "+c.name) || !strings.Contains(h.stdout, "--server") {
			t.Errorf("kpctl %s --help: exit %d\n%s%s", c.name, h.code, h.stdout, h.stderr)
		}
		if alt := kpctl(ctx, unreachable, "", "help", c.name); alt.stdout != h.stdout {
			t.Errorf("kpctl help %s differs from kpctl %s --help", c.name, c.name)
		}
	}
	if r := kpctl(ctx, unreachable, ""); r.code != 0 || !strings.Contains(r.stdout, "Commands:") {
		t.Errorf("kpctl without arguments should print help, got exit %d", r.code)
	}
}

func TestParseInterspersed(t *testing.T) {
	g := newGlobals(func(string) string { return "" })
	fs := newFlagSet("t")
	var out string
	fs.stringFlag(&out, "output", "o", "", "")
	g.register(fs)
	pos, err := fs.parseInterspersed([]string{"pods", "-n", "kube", "web", "-o", "yaml", "--", "-x"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(pos, " ") != "pods web -x" || g.ns() != "kube" || !g.namespaceSet || out != "yaml" {
		t.Errorf("positional %q, namespace %q, output %q", pos, g.ns(), out)
	}
}

func TestGlobalFlagsBeforeCommandSurvive(t *testing.T) {
	g := newGlobals(func(k string) string {
		if k == "KPLANE_TOKEN" {
			return "from-env"
		}
		return ""
	})
	root := newFlagSet("kpctl")
	g.register(root)
	rest, err := root.parseInterspersed([]string{"--server", "h:1", "-n", "a", "get", "pods"}, true)
	if err != nil || strings.Join(rest, " ") != "get pods" {
		t.Fatalf("rest %q, err %v", rest, err)
	}
	fs := newFlagSet("get")
	g.register(fs) // must not reset what the root parse set
	if _, err := fs.parseInterspersed([]string{"pods"}, false); err != nil {
		t.Fatal(err)
	}
	if g.server != "h:1" || g.ns() != "a" || g.token != "from-env" {
		t.Errorf("server %q, namespace %q, token %q", g.server, g.ns(), g.token)
	}
}

// failingWriter accepts limit bytes, then fails every write, as a pipe does
// once its reader has gone.
type failingWriter struct{ limit int }

var errBrokenPipe = errors.New("broken pipe")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.limit {
		n := w.limit
		w.limit = 0
		return n, errBrokenPipe
	}
	w.limit -= len(p)
	return len(p), nil
}

// TestFailedOutputFails checks that a command whose output did not all
// arrive exits 1 with one line saying so, whether the command noticed the
// failed write itself (api-resources flushes its table) or finished first
// (help, a dry run).
func TestFailedOutputFails(t *testing.T) {
	for _, args := range [][]string{
		{"--help"},
		{"get", "--help"},
		{"api-resources"},
		{"apply", "-f", "../../examples", "--dry-run=client"},
	} {
		for _, limit := range []int{0, 100} {
			var errOut testutil.SyncBuffer
			code := run(context.Background(), args, &env{
				stdin:  strings.NewReader(""),
				stdout: newOutput(&failingWriter{limit: limit}),
				stderr: newOutput(&errOut),
				getenv: func(string) string { return "" },
				now:    time.Now,
			})
			if want := "error: writing output: broken pipe\n"; code != 1 || errOut.String() != want {
				t.Errorf("kpctl %v, stdout failing after %d bytes: exit %d, stderr %q; want exit 1, %q", args, limit, code, errOut.String(), want)
			}
		}
	}
	// The same commands succeed when stdout works.
	if r := kpctl(context.Background(), unreachable, "", "api-resources"); r.code != 0 || !strings.Contains(r.stdout, "replicasets") {
		t.Errorf("api-resources: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func TestCombinedShortBools(t *testing.T) {
	fs := newFlagSet("exec")
	var i, tt bool
	var c string
	fs.boolFlag(&i, "stdin", "i", false, "")
	fs.boolFlag(&tt, "tty", "t", false, "")
	fs.stringFlag(&c, "container", "c", "", "")
	pos, err := fs.parseInterspersed([]string{"-it", "web", "--", "sh", "-it"}, false)
	if err != nil || !i || !tt || strings.Join(pos, " ") != "web sh -it" {
		t.Fatalf("-it: stdin %v tty %v positional %q err %v", i, tt, pos, err)
	}
	// A string flag does not combine: "-ic" stays one (unknown) flag.
	if _, err := newFlagSetWith(&c).parseInterspersed([]string{"-ic", "x"}, false); err == nil || !strings.Contains(err.Error(), "-ic") {
		t.Errorf("-ic: %v, want an error naming -ic", err)
	}
}

func newFlagSetWith(c *string) *flagSet {
	fs := newFlagSet("exec")
	var i bool
	fs.boolFlag(&i, "stdin", "i", false, "")
	fs.stringFlag(c, "container", "c", "", "")
	return fs
}
