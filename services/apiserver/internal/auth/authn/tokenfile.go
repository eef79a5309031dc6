package authn

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// TokenFile is a static token authenticator read from a CSV file in
// Kubernetes' --token-auth-file format, one identity a line:
//
//	token,user,uid,"group1,group2"
//
// The groups column is optional. It is meant for bootstrap identities;
// the file is read once at start.
type TokenFile struct {
	tokens map[string]*user.Info
}

// LoadTokenFile reads and validates path. A bad line is an error naming
// the line and the field, and nothing of the file is used.
func LoadTokenFile(path string) (*TokenFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token auth file: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only; a close error changes nothing
	tf, err := ParseTokenFile(f)
	if err != nil {
		return nil, fmt.Errorf("token auth file %s: %w", path, err)
	}
	return tf, nil
}

// ParseTokenFile parses the CSV format LoadTokenFile reads.
func ParseTokenFile(r io.Reader) (*TokenFile, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	tf := &TokenFile{tokens: map[string]*user.Info{}}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err // csv errors name line and column
		}
		line, _ := cr.FieldPos(0)
		if len(rec) < 3 {
			return nil, fmt.Errorf("line %d: want token,user,uid[,groups], got %d fields", line, len(rec))
		}
		if len(rec) > 4 {
			return nil, fmt.Errorf("line %d: want at most 4 fields (quote the groups: \"g1,g2\"), got %d", line, len(rec))
		}
		tok, name, uid := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2])
		switch {
		case tok == "":
			return nil, fmt.Errorf("line %d: field 1 (token): must not be empty", line)
		case strings.ContainsAny(tok, " \t"):
			return nil, fmt.Errorf("line %d: field 1 (token): must not contain whitespace", line)
		case name == "":
			return nil, fmt.Errorf("line %d: field 2 (user): must not be empty", line)
		case uid == "":
			return nil, fmt.Errorf("line %d: field 3 (uid): must not be empty", line)
		}
		if _, dup := tf.tokens[tok]; dup {
			return nil, fmt.Errorf("line %d: field 1 (token): duplicate of an earlier line's token", line)
		}
		u := &user.Info{Name: name, UID: uid}
		if len(rec) == 4 {
			for i, g := range strings.Split(rec[3], ",") {
				g = strings.TrimSpace(g)
				if g == "" {
					return nil, fmt.Errorf("line %d: field 4 (groups): group %d is empty", line, i+1)
				}
				u.Groups = append(u.Groups, g)
			}
		}
		u.Groups = withAuthenticated(u.Groups)
		tf.tokens[tok] = u
	}
	return tf, nil
}

// Len is the number of tokens the file holds.
func (t *TokenFile) Len() int { return len(t.tokens) }

// AuthenticateToken implements TokenAuthenticator: a token the file does
// not hold is not ok (another authenticator may know it).
func (t *TokenFile) AuthenticateToken(_ context.Context, token string) (*user.Info, bool, error) {
	u, ok := t.tokens[token]
	if !ok {
		return nil, false, nil
	}
	return u, true, nil
}

// withAuthenticated adds system:authenticated to groups unless present.
func withAuthenticated(groups []string) []string {
	for _, g := range groups {
		if g == user.AllAuthenticated {
			return groups
		}
	}
	return append(groups, user.AllAuthenticated)
}
