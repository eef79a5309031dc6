package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// logsCommand streams a container's log from the node agent running the
// pod: the pod names its node, the Node's status gives the agent's
// InternalIP and log port (daemonEndpoints.kubeletEndpoint), and the
// agent serves GET /logs/<namespace>/<pod>/<container>[?follow=true].
var logsCommand = &command{
	name:    "logs",
	usage:   "POD [-c CONTAINER] [-f]",
	summary: "Print the logs of a container in a pod",
	example: `  kpctl logs web-7d9f

  # Keep printing new lines until interrupted (or the container stops)
  kpctl logs -f web-7d9f -c server -n shop`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		var container string
		var follow bool
		fs.stringFlag(&container, "container", "c", "", "the container (required when the pod has more than one)")
		fs.boolFlag(&follow, "follow", "f", false, "stream new lines as they are written")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) != 1 {
				return errors.New("expected exactly one pod name: kpctl logs POD [-c CONTAINER] [-f]")
			}
			name := strings.TrimPrefix(strings.TrimPrefix(args[0], "pod/"), "pods/")
			a, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			ns := g.ns()
			obj, err := a.get(ctx, "Pod", ns, name)
			if err != nil {
				return err
			}
			pod := obj.GetPod()
			if container == "" {
				cs := pod.GetSpec().GetContainers()
				if len(cs) != 1 {
					names := make([]string, len(cs))
					for i, c := range cs {
						names[i] = c.GetName()
					}
					return fmt.Errorf("a container name must be specified for pod %s, choose one of: %v", name, names)
				}
				container = cs[0].GetName()
			}
			nodeName := pod.GetSpec().GetNodeName()
			if nodeName == "" {
				return fmt.Errorf("pod %s is not scheduled to a node yet; it has no logs", name)
			}
			nobj, err := a.get(ctx, "Node", "", nodeName)
			if err != nil {
				return fmt.Errorf("node %s of pod %s: %w", nodeName, name, err)
			}
			st := nobj.GetNode().GetStatus()
			host := ""
			for _, addr := range st.GetAddresses() {
				if addr.GetType() == "InternalIP" {
					host = addr.GetAddress()
					break
				}
			}
			port := st.GetDaemonEndpoints().GetKubeletEndpoint().GetPort()
			if host == "" || port == 0 {
				return fmt.Errorf("node %s does not publish an InternalIP and a node agent port", nodeName)
			}
			u := url.URL{
				Scheme: "http",
				Host:   net.JoinHostPort(host, strconv.Itoa(int(port))),
				Path:   "/logs/" + url.PathEscape(ns) + "/" + url.PathEscape(name) + "/" + url.PathEscape(container),
			}
			if follow {
				u.RawQuery = "follow=true"
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
			if err != nil {
				return fmt.Errorf("logs request: %w", err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("node agent on %s: %w", nodeName, err)
			}
			// Only read: a failed Close loses nothing.
			defer func() { _ = resp.Body.Close() }()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				return fmt.Errorf("node agent on %s: %s", nodeName, strings.TrimSpace(string(b)))
			}
			if _, err := io.Copy(e.stdout, resp.Body); err != nil && ctx.Err() == nil {
				return fmt.Errorf("reading logs: %w", err)
			}
			return ctx.Err()
		}
	},
}
