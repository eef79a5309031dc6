package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// adminCommand operates the control plane's etcd through the apiserver's
// Admin service (admins only): `kpctl admin etcd member list|add|remove`
// and `kpctl admin etcd snapshot save FILE`.
var adminCommand = &command{
	name:    "admin",
	usage:   "etcd member list | etcd member add NAME PEER_URL[,PEER_URL] | etcd member remove NAME|--id ID | etcd snapshot save FILE",
	summary: "Operate the control plane's etcd cluster (admins only)",
	example: `  kpctl admin etcd member list
  kpctl admin etcd member add apiserver-4 http://10.0.0.4:2380
  kpctl admin etcd member remove apiserver-2
  kpctl admin etcd snapshot save backup.db`,
	setup: func(fs *flagSet, g *globals) func(context.Context, *env, []string) error {
		byID := fs.Bool("id", false, "member remove: the argument is a member ID (hexadecimal, as member list prints it), not a name")
		return func(ctx context.Context, e *env, args []string) error {
			if len(args) < 2 || args[0] != "etcd" {
				return errors.New("admin needs etcd member list|add|remove or etcd snapshot save FILE")
			}
			var run func(context.Context, *api, kplanev1.AdminClient) error
			switch sub := args[1:]; {
			case len(sub) == 2 && sub[0] == "member" && sub[1] == "list":
				run = func(ctx context.Context, a *api, c kplanev1.AdminClient) error {
					resp, err := c.EtcdMemberList(ctx, &kplanev1.EtcdMemberListRequest{})
					if err != nil {
						return fmt.Errorf("list etcd members: %w", a.wrap(err))
					}
					printMembers(e, resp.GetMembers())
					return nil
				}
			case len(sub) == 4 && sub[0] == "member" && sub[1] == "add":
				name, urls := sub[2], strings.Split(sub[3], ",")
				run = func(ctx context.Context, a *api, c kplanev1.AdminClient) error {
					resp, err := c.EtcdMemberAdd(ctx, &kplanev1.EtcdMemberAddRequest{Name: name, PeerUrls: urls})
					if err != nil {
						return fmt.Errorf("add etcd member %s: %w", name, a.wrap(err))
					}
					e.stdout.printf("Member %s added (ID %s).\nStart its apiserver with:\n  --etcd-name %s --etcd-initial-cluster %s --etcd-initial-cluster-state existing\n",
						name, resp.GetMember().GetId(), name, resp.GetInitialCluster())
					return nil
				}
			case len(sub) == 3 && sub[0] == "member" && sub[1] == "remove":
				req := &kplanev1.EtcdMemberRemoveRequest{Name: sub[2]}
				if *byID {
					req = &kplanev1.EtcdMemberRemoveRequest{Id: sub[2]}
				}
				run = func(ctx context.Context, a *api, c kplanev1.AdminClient) error {
					resp, err := c.EtcdMemberRemove(ctx, req)
					if err != nil {
						return fmt.Errorf("remove etcd member %s: %w", sub[2], a.wrap(err))
					}
					e.stdout.printf("Member %s (ID %s) removed; its data dir can no longer join.\n", resp.GetRemoved().GetName(), resp.GetRemoved().GetId())
					printMembers(e, resp.GetMembers())
					return nil
				}
			case len(sub) == 3 && sub[0] == "snapshot" && sub[1] == "save":
				file := sub[2]
				run = func(ctx context.Context, a *api, c kplanev1.AdminClient) error {
					return saveSnapshot(ctx, e, a, c, file)
				}
			default:
				return fmt.Errorf("admin etcd: unknown or incomplete subcommand %q; want member list, member add NAME PEER_URL, member remove NAME, snapshot save FILE", strings.Join(args[1:], " "))
			}
			a, err := g.connect(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			return run(ctx, a, kplanev1.NewAdminClient(a.c.Conn()))
		}
	},
}

func printMembers(e *env, ms []*kplanev1.EtcdMember) {
	tw := tabwriter.NewWriter(e.stdout, 0, 8, 3, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tNAME\tLEADER\tPEER URLS\tCLIENT URLS")
	for _, m := range ms {
		name := m.GetName()
		if name == "" {
			name = "(unstarted)"
		}
		leader := ""
		if m.GetIsLeader() {
			leader = "*"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.GetId(), name, leader, strings.Join(m.GetPeerUrls(), ","), strings.Join(m.GetClientUrls(), ","))
	}
	_ = tw.Flush() // e.stdout keeps its own first write error
}

// saveSnapshot writes the snapshot to a temporary file beside FILE and
// renames it into place once complete, so FILE is never half a snapshot.
func saveSnapshot(ctx context.Context, e *env, a *api, c kplanev1.AdminClient, file string) error {
	stream, err := c.EtcdSnapshot(ctx, &kplanev1.EtcdSnapshotRequest{})
	if err != nil {
		return fmt.Errorf("etcd snapshot: %w", a.wrap(err))
	}
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".part-*")
	if err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename; else a partial file
	var size, rev int64
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = tmp.Close()
			return fmt.Errorf("etcd snapshot: %w", a.wrap(err))
		}
		if msg.GetRevision() != 0 {
			rev = msg.GetRevision()
		}
		if _, err := tmp.Write(msg.GetData()); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("etcd snapshot: write %s: %w", tmp.Name(), err)
		}
		size += int64(len(msg.GetData()))
	}
	if size == 0 {
		_ = tmp.Close()
		return errors.New("etcd snapshot: the apiserver sent an empty snapshot")
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("etcd snapshot: sync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("etcd snapshot: close: %w", err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("etcd snapshot: %w", err)
	}
	e.stdout.printf("Snapshot saved to %s (%d bytes, revision %d). Restore with: apiserver --data-dir EMPTY_DIR --etcd-restore-from %s\n", file, size, rev, file)
	return nil
}
