// Package admin serves kplane.v1.Admin: the etcd cluster's membership and
// snapshots, for admins only (system:masters, or RBAC allowing every verb
// on every resource, as cluster-admin does).
package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/services/apiserver/internal/auth/authz"
)

// Config is what the admin service needs.
type Config struct {
	// Client reaches the etcd cluster (the local member when embedded).
	Client *clientv3.Client
	// Leader returns the Raft leader's member ID (0 when unknown).
	Leader func(ctx context.Context) (uint64, error)
	// Authorizer decides who is an admin.
	Authorizer authz.Authorizer
	Logger     hclog.Logger
}

// Server implements kplanev1.AdminServer.
type Server struct {
	kplanev1.UnimplementedAdminServer
	cfg Config
	log hclog.Logger
}

// New returns the admin service.
func New(cfg Config) *Server {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Server{cfg: cfg, log: log}
}

// snapshotChunk is how much of the snapshot one message carries.
const snapshotChunk = 256 << 10

// authorize lets admins through: the request must be allowed every verb
// on every resource of every group.
func (s *Server) authorize(ctx context.Context, what string) error {
	u := authz.UserFrom(ctx)
	d, reason := s.cfg.Authorizer.Authorize(ctx, &authz.Attributes{User: u, Verb: "*", APIGroup: "*", Resource: "*", Kind: "etcd"})
	if d == authz.Allow {
		s.log.Info("etcd admin request", "operation", what, "user", u.Name)
		return nil
	}
	s.log.Warn("etcd admin request denied", "operation", what, "user", u.Name, "reason", reason)
	return status.Errorf(codes.PermissionDenied, "user %q may not %s: the etcd admin API is for admins only (group system:masters, or a role allowing every verb on every resource such as cluster-admin)", u.Name, what)
}

// EtcdMemberList implements kplanev1.AdminServer.
func (s *Server) EtcdMemberList(ctx context.Context, _ *kplanev1.EtcdMemberListRequest) (*kplanev1.EtcdMemberListResponse, error) {
	if err := s.authorize(ctx, "list etcd members"); err != nil {
		return nil, err
	}
	resp, err := s.cfg.Client.MemberList(ctx)
	if err != nil {
		return nil, etcdError("list etcd members", err)
	}
	leader, err := s.cfg.Leader(ctx)
	if err != nil {
		return nil, etcdError("find the etcd leader", err)
	}
	return &kplanev1.EtcdMemberListResponse{
		ClusterId: hexID(resp.Header.GetClusterId()),
		Members:   members(resp.Members, leader),
		RaftTerm:  resp.Header.GetRaftTerm(),
	}, nil
}

// EtcdMemberAdd implements kplanev1.AdminServer.
func (s *Server) EtcdMemberAdd(ctx context.Context, req *kplanev1.EtcdMemberAddRequest) (*kplanev1.EtcdMemberAddResponse, error) {
	if err := s.authorize(ctx, "add an etcd member"); err != nil {
		return nil, err
	}
	name := req.GetName()
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name: required (the new apiserver's --etcd-name)")
	}
	if strings.ContainsAny(name, "=,") {
		return nil, status.Errorf(codes.InvalidArgument, "name: %q must not contain '=' or ','", name)
	}
	if len(req.GetPeerUrls()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "peer_urls: at least one is required (the new apiserver's --etcd-advertise-peer)")
	}
	for i, u := range req.GetPeerUrls() {
		if err := checkPeerURL(u); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "peer_urls[%d]: %v", i, err)
		}
	}
	list, err := s.cfg.Client.MemberList(ctx)
	if err != nil {
		return nil, etcdError("list etcd members", err)
	}
	for _, m := range list.Members {
		if m.Name == name {
			return nil, status.Errorf(codes.AlreadyExists, "name: etcd member %q already exists (ID %s)", name, hexID(m.ID))
		}
	}
	resp, err := s.cfg.Client.MemberAdd(ctx, req.GetPeerUrls())
	if err != nil {
		return nil, etcdError("add etcd member", err)
	}
	var parts []string
	for _, m := range resp.Members {
		n := m.Name
		if m.ID == resp.Member.ID {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	added := member(resp.Member, 0)
	added.Name = name
	s.log.Info("etcd member added", "name", name, "id", added.Id, "peer_urls", req.GetPeerUrls())
	return &kplanev1.EtcdMemberAddResponse{Member: added, Members: members(resp.Members, 0), InitialCluster: strings.Join(parts, ",")}, nil
}

// EtcdMemberRemove implements kplanev1.AdminServer.
func (s *Server) EtcdMemberRemove(ctx context.Context, req *kplanev1.EtcdMemberRemoveRequest) (*kplanev1.EtcdMemberRemoveResponse, error) {
	if err := s.authorize(ctx, "remove an etcd member"); err != nil {
		return nil, err
	}
	if (req.GetName() == "") == (req.GetId() == "") {
		return nil, status.Error(codes.InvalidArgument, "name, id: give exactly one")
	}
	var wantID uint64
	if req.GetId() != "" {
		id, err := strconv.ParseUint(req.GetId(), 16, 64)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "id: %q is not a hexadecimal member ID", req.GetId())
		}
		wantID = id
	}
	list, err := s.cfg.Client.MemberList(ctx)
	if err != nil {
		return nil, etcdError("list etcd members", err)
	}
	var target *etcdserverpb.Member
	for _, m := range list.Members {
		if (wantID != 0 && m.ID == wantID) || (req.GetName() != "" && m.Name == req.GetName()) {
			target = m
			break
		}
	}
	if target == nil {
		what := "name " + strconv.Quote(req.GetName())
		if wantID != 0 {
			what = "id " + req.GetId()
		}
		return nil, status.Errorf(codes.NotFound, "no etcd member with %s", what)
	}
	if len(list.Members) == 1 {
		return nil, status.Errorf(codes.FailedPrecondition, "etcd member %q is the cluster's only member; removing it would end the cluster", target.Name)
	}
	resp, err := s.cfg.Client.MemberRemove(ctx, target.ID)
	if err != nil {
		return nil, etcdError("remove etcd member", err)
	}
	s.log.Info("etcd member removed", "name", target.Name, "id", hexID(target.ID))
	return &kplanev1.EtcdMemberRemoveResponse{Removed: member(target, 0), Members: members(resp.Members, 0)}, nil
}

// EtcdSnapshot implements kplanev1.AdminServer.
func (s *Server) EtcdSnapshot(_ *kplanev1.EtcdSnapshotRequest, stream grpc.ServerStreamingServer[kplanev1.EtcdSnapshotResponse]) error {
	ctx := stream.Context()
	if err := s.authorize(ctx, "save an etcd snapshot"); err != nil {
		return err
	}
	// A linearizable read first: the snapshot then holds every write
	// acknowledged before the request.
	cur, err := s.cfg.Client.Get(ctx, "/registry", clientv3.WithCountOnly(), clientv3.WithLimit(1))
	if err != nil {
		return etcdError("read the current revision", err)
	}
	rc, err := s.cfg.Client.Snapshot(ctx)
	if err != nil {
		return etcdError("start etcd snapshot", err)
	}
	defer func() { _ = rc.Close() }() // read to the end or abandoned; nothing to report
	buf := make([]byte, snapshotChunk)
	first := true
	var total int64
	for {
		n, err := io.ReadFull(rc, buf)
		if n > 0 {
			msg := &kplanev1.EtcdSnapshotResponse{Data: append([]byte(nil), buf[:n]...)}
			if first {
				msg.Revision = cur.Header.Revision
				first = false
			}
			if serr := stream.Send(msg); serr != nil {
				return serr
			}
			total += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return etcdError("read etcd snapshot", err)
		}
	}
	s.log.Info("etcd snapshot sent", "bytes", total, "revision", cur.Header.Revision)
	return nil
}

func checkPeerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q is not a URL: %w", s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" {
		return fmt.Errorf("%q: want http(s)://host:port", s)
	}
	return nil
}

// etcdError keeps a status etcd gave (a refused reconfiguration is
// FailedPrecondition, no quorum Unavailable) and calls the rest
// Unavailable, retryable.
func etcdError(op string, err error) error {
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return status.Errorf(st.Code(), "%s: %s", op, st.Message())
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Errorf(codes.Unavailable, "%s: %v", op, err)
}

func hexID(id uint64) string { return strconv.FormatUint(id, 16) }

func member(m *etcdserverpb.Member, leader uint64) *kplanev1.EtcdMember {
	return &kplanev1.EtcdMember{
		Id: hexID(m.ID), Name: m.Name, PeerUrls: m.PeerURLs, ClientUrls: m.ClientURLs,
		IsLearner: m.IsLearner, IsLeader: leader != 0 && m.ID == leader,
	}
}

func members(ms []*etcdserverpb.Member, leader uint64) []*kplanev1.EtcdMember {
	out := make([]*kplanev1.EtcdMember, 0, len(ms))
	for _, m := range ms {
		out = append(out, member(m, leader))
	}
	return out
}
