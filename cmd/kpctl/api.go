package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/client"
)

// api wraps the apiserver client so that every error it returns reads as
// "<Code>: <server message>" while status.Code still sees the gRPC code.
type api struct {
	c *client.Client
}

// connect dials the apiserver named by the global flags.
func (g *globals) connect(ctx context.Context) (*api, error) {
	s, err := g.settings()
	if err != nil {
		return nil, err
	}
	opts := client.Options{
		Address:        s.server,
		Token:          s.token,
		TokenFile:      s.tokenFile,
		TLSCA:          s.tlsCA,
		TLSCAData:      s.caData,
		ClientCertFile: s.cert,
		ClientKeyFile:  s.key,
		ClientCertData: s.certData,
		ClientKeyData:  s.keyData,
		UserAgent:      "kpctl",
	}
	if g.timeout != "" {
		d, err := time.ParseDuration(g.timeout)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("invalid --request-timeout %q: want a positive duration such as 10s", g.timeout)
		}
		opts.CallTimeout = d
	}
	c, err := client.Dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &api{c: c}, nil
}

func (a *api) close() { _ = a.c.Close() }

// apiError is a gRPC error rendered the way kpctl reports it.
type apiError struct {
	st   *status.Status
	addr string
}

func (e *apiError) Error() string {
	msg := e.st.Message()
	if e.st.Code() == codes.Unavailable || e.st.Code() == codes.DeadlineExceeded {
		msg = fmt.Sprintf("apiserver %s: %s", e.addr, msg)
	}
	return fmt.Sprintf("%s: %s", e.st.Code(), msg)
}

// GRPCStatus lets status.Code and the client.Is* helpers see the code.
func (e *apiError) GRPCStatus() *status.Status { return e.st }

func (a *api) wrap(err error) error {
	if err == nil {
		return nil
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if st.Code() == codes.Canceled {
		return context.Canceled
	}
	return &apiError{st: st, addr: a.c.Address()}
}

func (a *api) get(ctx context.Context, kind, ns, name string) (*kplanev1.Object, error) {
	resp, err := a.c.Get(ctx, &kplanev1.GetRequest{Kind: kind, Namespace: ns, Name: name})
	return resp.GetObject(), a.wrap(err)
}

// list reads every page of a listing and returns the items and the
// resourceVersion of the first page's snapshot.
func (a *api) list(ctx context.Context, req *kplanev1.ListRequest) ([]*kplanev1.Object, string, error) {
	var items []*kplanev1.Object
	rv, err := a.listPages(ctx, req, func(page []*kplanev1.Object) {
		items = append(items, page...)
	})
	return items, rv, err
}

// listPages lists in pages of 500, handing each page to f as it arrives
// (so a caller that keeps less than the objects, a table's rows, need not
// hold them all), and returns the List's resourceVersion.
func (a *api) listPages(ctx context.Context, req *kplanev1.ListRequest, f func([]*kplanev1.Object)) (string, error) {
	var rv string
	req.Limit = 500
	for {
		resp, err := a.c.List(ctx, req)
		if err != nil {
			return "", a.wrap(err)
		}
		if rv == "" {
			rv = resp.GetResourceVersion()
		}
		f(resp.GetItems())
		if resp.GetContinue() == "" {
			return rv, nil
		}
		req.Continue = resp.GetContinue()
	}
}

func (a *api) create(ctx context.Context, obj *kplanev1.Object) (*kplanev1.Object, error) {
	resp, err := a.c.Create(ctx, &kplanev1.CreateRequest{Object: obj})
	return resp.GetObject(), a.wrap(err)
}

func (a *api) update(ctx context.Context, obj *kplanev1.Object) (*kplanev1.Object, error) {
	resp, err := a.c.Update(ctx, &kplanev1.UpdateRequest{Object: obj})
	return resp.GetObject(), a.wrap(err)
}

func (a *api) delete(ctx context.Context, req *kplanev1.DeleteRequest) (*kplanev1.Object, error) {
	resp, err := a.c.Delete(ctx, req)
	return resp.GetObject(), a.wrap(err)
}

func (a *api) watch(ctx context.Context, req *kplanev1.WatchRequest) (grpc.ServerStreamingClient[kplanev1.WatchResponse], error) {
	s, err := a.c.Watch(ctx, req)
	return s, a.wrap(err)
}

// retryOnConflict reruns a read-modify-write while it fails with Aborted.
func retryOnConflict(ctx context.Context, fn func() error) error {
	return client.RetryOnConflict(ctx, client.DefaultRetry, fn)
}
