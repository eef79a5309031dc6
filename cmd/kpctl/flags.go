package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kplane/kplane/pkg/client"
)

// errHelp reports that -h or --help was given.
var errHelp = flag.ErrHelp

// flagSet is a flag.FlagSet that knows which one-letter flags are aliases
// of long ones ("-n" for "--namespace"), for help output.
type flagSet struct {
	*flag.FlagSet
	short map[string]string // long name -> short alias
	// dash is the number of positional arguments before "--", or -1
	// when there was none (kpctl create job NAME -- CMD ...).
	dash int
}

func newFlagSet(name string) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned and printed by run
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, short: map[string]string{}, dash: -1}
}

// alias registers short as another name of the already defined flag long.
func (f *flagSet) alias(short, long string) {
	fl := f.Lookup(long)
	f.Var(fl.Value, short, fl.Usage)
	f.short[long] = short
}

func (f *flagSet) stringFlag(p *string, long, short, def, usage string) {
	f.StringVar(p, long, def, usage)
	if short != "" {
		f.alias(short, long)
	}
}

func (f *flagSet) boolFlag(p *bool, long, short string, def bool, usage string) {
	f.BoolVar(p, long, def, usage)
	if short != "" {
		f.alias(short, long)
	}
}

// parseInterspersed parses flags anywhere among the arguments, as kubectl
// does ("get pods -n kube-system"), and returns the positional arguments.
// With stopAtFirst, parsing ends at the first positional argument, which is
// how global flags before the command name are read.
func (f *flagSet) parseInterspersed(args []string, stopAtFirst bool) ([]string, error) {
	args = f.expandShortBools(args)
	var pos []string
	for {
		if err := f.Parse(args); err != nil {
			return nil, err
		}
		rest := f.Args()
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			f.dash = len(pos)
			return append(pos, rest...), nil
		}
		if len(rest) == 0 || stopAtFirst {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// expandShortBools splits combined one-letter boolean flags as kubectl
// takes them ("-it" is "-i -t"), up to "--"; anything else stays as is.
func (f *flagSet) expandShortBools(args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if !f.combinedBools(a) {
			out = append(out, a)
			continue
		}
		for _, c := range a[1:] {
			out = append(out, "-"+string(c))
		}
	}
	return out
}

// combinedBools: a is "-xy..." and not a flag itself, and every letter is
// a one-letter boolean flag.
func (f *flagSet) combinedBools(a string) bool {
	if len(a) < 3 || a[0] != '-' || a[1] == '-' || strings.Contains(a, "=") || f.Lookup(a[1:]) != nil {
		return false
	}
	for _, c := range a[1:] {
		fl := f.Lookup(string(c))
		if fl == nil {
			return false
		}
		if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			return false
		}
	}
	return true
}

// printDefaults lists the flags as "-n, --namespace string   usage"; a
// failed write sticks in w.
func (f *flagSet) printDefaults(w *output) {
	aliases := map[string]bool{}
	for _, s := range f.short {
		aliases[s] = true
	}
	var lines [][2]string
	f.VisitAll(func(fl *flag.Flag) {
		if aliases[fl.Name] {
			return
		}
		typ, usage := flag.UnquoteUsage(fl)
		if typ == "value" {
			typ = "string" // every custom flag here takes a string
		}
		name := "    --" + fl.Name
		if s, ok := f.short[fl.Name]; ok {
			name = "-" + s + ", --" + fl.Name
		}
		if typ != "" {
			name += " " + typ
		}
		if fl.DefValue != "" && fl.DefValue != "false" && fl.DefValue != "[]" {
			usage += fmt.Sprintf(" (default %q)", fl.DefValue)
		}
		lines = append(lines, [2]string{name, usage})
	})
	sort.Slice(lines, func(i, j int) bool {
		return strings.TrimLeft(lines[i][0], " -") < strings.TrimLeft(lines[j][0], " -")
	})
	tw := newColumns(w)
	for _, l := range lines {
		tw.printf("  %s\t%s\n", l[0], l[1])
	}
	_ = tw.flush() // the error is w's, which keeps it
}

// stringList is a repeatable string flag (-f a.yaml -f b.yaml).
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// globals are the flags every command accepts: where the apiserver is,
// how to authenticate, and the namespace.
type globals struct {
	server, token, tokenFile, tlsCA string
	// clientCert and clientKey are --client-certificate and --client-key.
	clientCert, clientKey string
	// kubeconfig is --kubeconfig; empty means $KUBECONFIG, then
	// $HOME/.kube/config.
	kubeconfig string
	// serverSet: --server or KPLANE_SERVER named the apiserver, which then
	// beats the kubeconfig's.
	serverSet    bool
	getenv       func(string) string
	namespace    string
	namespaceSet bool
	timeout      string
	// envToken is KPLANE_TOKEN; --token-file overrides it, not only --token.
	envToken string
}

func newGlobals(getenv func(string) string) *globals {
	g := &globals{server: getenv("KPLANE_SERVER"), token: getenv("KPLANE_TOKEN"), envToken: getenv("KPLANE_TOKEN"), getenv: getenv}
	g.serverSet = g.server != ""
	if g.server == "" {
		g.server = client.DefaultAddress
	}
	return g
}

// register adds the global flags to fs. Current values become defaults, so
// flags given before the command name survive registration on the
// command's own flag set.
func (g *globals) register(fs *flagSet) {
	fs.Var(serverValue{g}, "server", "apiserver address host:port, or a comma-separated list of them for an HA control plane (env KPLANE_SERVER; default the kubeconfig's, else "+client.DefaultAddress+")")
	fs.alias("s", "server")
	fs.StringVar(&g.clientCert, "client-certificate", g.clientCert, "PEM client certificate to authenticate with (needs --tls-ca)")
	fs.StringVar(&g.clientKey, "client-key", g.clientKey, "PEM private key of --client-certificate")
	fs.StringVar(&g.kubeconfig, "kubeconfig", g.kubeconfig, "kubeconfig file (default $KUBECONFIG, else ~/.kube/config); flags override its server, CA and credentials")
	fs.StringVar(&g.token, "token", g.token, "bearer token for the apiserver (env KPLANE_TOKEN)")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "file holding the bearer token")
	fs.StringVar(&g.tlsCA, "tls-ca", g.tlsCA, "PEM CA bundle; connect with TLS verified against it")
	fs.StringVar(&g.timeout, "request-timeout", g.timeout, "how long to wait for one request, e.g. 10s (default 30s)")
	fs.Var(namespaceValue{g}, "namespace", "namespace of the objects (default \"default\")")
	fs.alias("n", "namespace")
}

// serverValue records that --server was given explicitly.
type serverValue struct{ g *globals }

func (v serverValue) String() string {
	if v.g == nil {
		return ""
	}
	return v.g.server
}

func (v serverValue) Set(s string) error {
	if s == "" {
		return errors.New("server must not be empty")
	}
	v.g.server, v.g.serverSet = s, true
	return nil
}

// ns returns the namespace to use: --namespace, or "default".
func (g *globals) ns() string {
	if g.namespace == "" {
		return "default"
	}
	return g.namespace
}

// namespaceValue records that --namespace was given explicitly, which
// matters when a manifest names a different namespace.
type namespaceValue struct{ g *globals }

func (v namespaceValue) String() string {
	if v.g == nil {
		return ""
	}
	return v.g.namespace
}

func (v namespaceValue) Set(s string) error {
	if s == "" {
		return errors.New("namespace must not be empty")
	}
	v.g.namespace, v.g.namespaceSet = s, true
	return nil
}
