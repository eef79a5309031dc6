package main

import (
	"context"
	"errors"
	"strings"

	"github.com/kplane/kplane/pkg/pki"
)

// certsCommand writes the cluster's CA, certificates and keys (pkg/pki)
// and an admin kubeconfig; it talks to no apiserver.
var certsCommand = &command{
	name:    "certs",
	usage:   "--dir DIR [--hosts H1,H2] [--nodes N1,N2] [--identities C1,C2]",
	summary: "Create the CA, certificates and keys a TLS cluster runs with",
	example: `  # CA, apiserver, admin, every controller, three nodes, ServiceAccount keys
  kpctl certs --dir ./certs --nodes node-1,node-2,node-3 --hosts kplane.example
  # Existing files are kept: running it again only adds what is missing
  kpctl certs --dir ./certs --nodes node-4
  kpctl --kubeconfig ./certs/admin.kubeconfig get nodes`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		var dir, hosts, nodes, identities string
		fs.StringVar(&dir, "dir", "", "directory to write into (created if missing)")
		fs.StringVar(&hosts, "hosts", "", "extra DNS names and IPs of the apiserver certificate, comma-separated (localhost, 127.0.0.1, ::1 and apiserver are always in)")
		fs.StringVar(&nodes, "nodes", "", "node names, comma-separated: each gets <node>.crt/.key as system:node:<node> in system:nodes")
		fs.StringVar(&identities, "identities", strings.Join(pki.Controllers, ","), "controller binaries, comma-separated: each gets <binary>.crt/.key as system:kplane:<binary>")
		return func(_ context.Context, e *env, args []string) error {
			if len(args) != 0 {
				return errors.New("certs takes no arguments")
			}
			if dir == "" {
				return errors.New("--dir is required")
			}
			res, err := pki.Generate(dir, pki.Options{Hosts: splitList(hosts), Nodes: splitList(nodes), Controllers: splitList(identities)})
			if err != nil {
				return err
			}
			wrote, err := pki.WriteAdminKubeconfig(dir, "https://"+g.server)
			if err != nil {
				return err
			}
			if wrote {
				res.Written = append(res.Written, pki.AdminKubeconfig)
			} else {
				res.Kept = append(res.Kept, pki.AdminKubeconfig)
			}
			for _, f := range res.Written {
				e.stdout.printf("wrote %s\n", f)
			}
			if len(res.Kept) > 0 {
				e.stdout.printf("kept %d existing files\n", len(res.Kept))
			}
			return nil
		}
	},
}

// splitList splits a comma-separated flag; empty gives an empty, non-nil list.
func splitList(s string) []string {
	out := []string{}
	if s == "" {
		return out
	}
	for _, x := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(x))
	}
	return out
}
