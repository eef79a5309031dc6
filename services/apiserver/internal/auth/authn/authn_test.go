package authn

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// TestParseTokenFile: the Kubernetes CSV format is read, groups get
// system:authenticated, and each bad line names its line and field.
func TestParseTokenFile(t *testing.T) {
	tf, err := ParseTokenFile(strings.NewReader("# bootstrap\nt1,alice,u1,\"dev,ops\"\nt2,bob,u2\n"))
	if err != nil {
		t.Fatal(err)
	}
	u, ok, err := tf.AuthenticateToken(context.Background(), "t1")
	if !ok || err != nil || u.Name != "alice" || u.UID != "u1" || !slices.Equal(u.Groups, []string{"dev", "ops", user.AllAuthenticated}) {
		t.Fatalf("t1: %+v %v %v", u, ok, err)
	}
	u, ok, _ = tf.AuthenticateToken(context.Background(), "t2")
	if !ok || u.Name != "bob" || !slices.Equal(u.Groups, []string{user.AllAuthenticated}) {
		t.Fatalf("t2: %+v", u)
	}
	if _, ok, err := tf.AuthenticateToken(context.Background(), "t3"); ok || err != nil {
		t.Fatalf("unknown token: %v %v", ok, err)
	}
	for _, c := range []struct{ in, want string }{
		{"t1,alice\n", "line 1: want token,user,uid[,groups], got 2 fields"},
		{"ok,a,1\n,alice,u1\n", "line 2: field 1 (token): must not be empty"},
		{"t 1,alice,u1\n", "line 1: field 1 (token): must not contain whitespace"},
		{"t1,,u1\n", "line 1: field 2 (user): must not be empty"},
		{"t1,alice,\n", "line 1: field 3 (uid): must not be empty"},
		{"t1,alice,u1,a,b\n", "line 1: want at most 4 fields"},
		{"t1,alice,u1,\"a,,b\"\n", "line 1: field 4 (groups): group 2 is empty"},
		{"t1,a,1\nt1,b,2\n", "line 2: field 1 (token): duplicate"},
		{"t1,\"alice,u1\n", "line 1"},
	} {
		_, err := ParseTokenFile(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.in, err, c.want)
		}
	}
	if _, err := LoadTokenFile("/nonexistent/tokens.csv"); err == nil || !strings.Contains(err.Error(), "token auth file") {
		t.Errorf("missing file: %v", err)
	}
}

type fakeErrTokens struct{}

func (fakeErrTokens) AuthenticateToken(_ context.Context, tok string) (*user.Info, bool, error) {
	if tok == "expired" {
		return nil, true, errors.New("token expired")
	}
	return nil, false, nil
}

// TestChainDecisions: the outcomes of the chain without TLS (certificates
// are covered by the apiserver's TLS tests).
func TestChainDecisions(t *testing.T) {
	tf, err := ParseTokenFile(strings.NewReader("good,alice,u1\n"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bearer := func(s string) Credentials { return Credentials{Authorization: []string{s}} }

	off := New(Config{})
	if off.Enabled() {
		t.Fatal("no authenticator: enabled")
	}
	if u, err := off.Authenticate(ctx, bearer("Bearer whatever")); err != nil || u.Name != user.Anonymous {
		t.Fatalf("disabled: %+v %v", u, err)
	}

	for _, anon := range []bool{false, true} {
		c := New(Config{Tokens: []TokenAuthenticator{fakeErrTokens{}, tf}, Anonymous: anon})
		if u, err := c.Authenticate(ctx, bearer("Bearer good")); err != nil || u.Name != "alice" {
			t.Errorf("anon=%v good token: %+v %v", anon, u, err)
		}
		for _, bad := range []string{"Bearer nope", "Bearer expired", "Basic Zm9vOmJhcg==", "Bearer", "Bearer a b"} {
			if _, err := c.Authenticate(ctx, bearer(bad)); !IsRefusal(err) {
				t.Errorf("anon=%v %q: %v, want a refusal (never anonymous)", anon, bad, err)
			}
		}
		u, err := c.Authenticate(ctx, Credentials{})
		if anon && (err != nil || u.Name != user.Anonymous || !slices.Equal(u.Groups, []string{user.AllUnauthenticated})) {
			t.Errorf("anonymous on, no credentials: %+v %v", u, err)
		}
		if !anon && !IsRefusal(err) {
			t.Errorf("anonymous off, no credentials: %+v %v", u, err)
		}
		if u, err := c.Authenticate(ctx, Credentials{Public: true}); err != nil || u.Name != user.Anonymous {
			t.Errorf("public method without credentials: %+v %v", u, err)
		}
		if _, err := c.Authenticate(ctx, Credentials{Public: true, Authorization: []string{"Bearer nope"}}); !IsRefusal(err) {
			t.Errorf("public method with a bad token: %v", err)
		}
	}
	// The refusal never echoes the token.
	c := New(Config{Tokens: []TokenAuthenticator{tf}})
	if _, err := c.Authenticate(ctx, bearer("Bearer s3cr3t-value")); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("refusal text: %v", err)
	}
}

func TestParseBearer(t *testing.T) {
	for _, c := range []struct {
		in      []string
		tok     string
		present bool
		bad     bool
	}{
		{nil, "", false, false},
		{[]string{"Bearer abc"}, "abc", true, false},
		{[]string{"bearer  abc "}, "abc", true, false},
		{[]string{"Bearer"}, "", true, true},
		{[]string{"Bearer "}, "", true, true},
		{[]string{"Basic abc"}, "", true, true},
		{[]string{"Bearer a\tb"}, "", true, true},
		{[]string{"Bearer a", "Bearer b"}, "", true, true},
		{[]string{""}, "", true, true},
	} {
		tok, present, err := ParseBearer(c.in)
		if tok != c.tok || present != c.present || (err != nil) != c.bad {
			t.Errorf("%q: got %q %v %v", c.in, tok, present, err)
		}
	}
}

// FuzzParseBearer: whatever the header, the parser never panics, a token
// it returns is non-empty without whitespace and appears in the input,
// and an error always comes with present.
func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer abc", "Bearer", "Basic x", "", " Bearer  x ", "Bearer a b", "BEARER \x00", "Bearer é"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, v string, twice bool) {
		in := []string{v}
		if twice {
			in = append(in, v)
		}
		tok, present, err := ParseBearer(in)
		if !present {
			t.Fatalf("%q: not present", in)
		}
		if err != nil {
			if tok != "" {
				t.Fatalf("%q: token %q with error %v", in, tok, err)
			}
			return
		}
		if twice || tok == "" || strings.ContainsAny(tok, " \t\r\n") || !strings.Contains(v, tok) {
			t.Fatalf("%q: bad token %q", in, tok)
		}
	})
}
