package main

import (
	"context"
	"fmt"
	"time"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/validation"
)

// tokenCreator is "kpctl create token SA": a TokenRequest for a
// ServiceAccount, printing the token (as `kubectl create token`).
type tokenCreator struct {
	duration string
}

func (c *tokenCreator) run(ctx context.Context, e *env, g *globals, args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("exactly one SERVICEACCOUNT name is required, got %d", len(args))
	}
	name := args[0]
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("invalid service account name %q: %v", name, msgs)
	}
	req := &kplanev1.CreateTokenRequest{Namespace: g.ns(), ServiceAccountName: name}
	if c.duration != "" {
		d, err := time.ParseDuration(c.duration)
		if err != nil || d <= 0 || d%time.Second != 0 {
			return fmt.Errorf("invalid --duration %q: want a positive whole number of seconds such as 10m or 1h", c.duration)
		}
		req.ExpirationSeconds = int64(d / time.Second)
	}
	a, err := g.connect(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	resp, err := kplanev1.NewResourcesClient(a.c.Conn()).CreateToken(ctx, req)
	if err != nil {
		return a.wrap(err)
	}
	if _, err := fmt.Fprintln(e.stdout, resp.GetToken()); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}
