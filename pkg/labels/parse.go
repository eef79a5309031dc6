package labels

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseError reports what is wrong with a selector string and where.
type ParseError struct {
	// Pos is the byte offset (0-based) of the offending token.
	Pos int
	// Msg says what was found and what was expected.
	Msg string
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("unable to parse requirement: %s at position %d", e.Msg, e.Pos)
}

type tokenKind int

const (
	tokEOF tokenKind = iota
	tokIdent
	tokEq       // =
	tokDoubleEq // ==
	tokNotEq    // !=
	tokNot      // !
	tokOpen     // (
	tokClose    // )
	tokComma    // ,
)

type token struct {
	kind tokenKind
	text string
	pos  int
}

// describe names a token for error messages.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of string"
	case tokIdent:
		return "identifier " + strconv.Quote(t.text)
	}
	return "'" + t.text + "'"
}

// isSpecial reports the characters that end an identifier.
func isSpecial(c byte) bool {
	switch c {
	case '=', '!', '(', ')', ',':
		return true
	}
	return false
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// lex splits s into tokens; it cannot fail, since anything that is not an
// operator or whitespace is part of an identifier, checked later.
func lex(s string) []token {
	var toks []token
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case isSpace(c):
			i++
		case c == '=' && i+1 < len(s) && s[i+1] == '=':
			toks = append(toks, token{tokDoubleEq, "==", i})
			i += 2
		case c == '=':
			toks = append(toks, token{tokEq, "=", i})
			i++
		case c == '!' && i+1 < len(s) && s[i+1] == '=':
			toks = append(toks, token{tokNotEq, "!=", i})
			i += 2
		case c == '!':
			toks = append(toks, token{tokNot, "!", i})
			i++
		case c == '(':
			toks = append(toks, token{tokOpen, "(", i})
			i++
		case c == ')':
			toks = append(toks, token{tokClose, ")", i})
			i++
		case c == ',':
			toks = append(toks, token{tokComma, ",", i})
			i++
		default:
			start := i
			for i < len(s) && !isSpace(s[i]) && !isSpecial(s[i]) {
				i++
			}
			toks = append(toks, token{tokIdent, s[start:i], start})
		}
	}
	return append(toks, token{tokEOF, "", len(s)})
}

type parser struct {
	toks []token
	i    int
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tokEOF {
		p.i++
	}
	return t
}

func unexpected(t token, expected string) error {
	return &ParseError{Pos: t.pos, Msg: fmt.Sprintf("found %s, expected: %s", t.describe(), expected)}
}

// Parse parses a label selector: comma-separated requirements, all of which
// must hold. A requirement is `key=value`, `key==value`, `key!=value`,
// `key in (v1,v2)`, `key notin (v1,v2)`, `key` (exists) or `!key` (does not
// exist). Whitespace around tokens is ignored. Keys must be qualified names
// and values valid label values. An empty string selects everything.
func Parse(s string) (Selector, error) {
	p := &parser{toks: lex(s)}
	if p.peek().kind == tokEOF {
		return Everything(), nil
	}
	var reqs []Requirement
	for {
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		reqs = append(reqs, r)
		switch t := p.next(); t.kind {
		case tokEOF:
			return New(reqs...), nil
		case tokComma:
		default:
			return nil, unexpected(t, "',' or end of string")
		}
	}
}

func (p *parser) requirement() (Requirement, error) {
	if t := p.peek(); t.kind == tokNot {
		p.next()
		key := p.next()
		if key.kind != tokIdent {
			return Requirement{}, unexpected(key, "identifier")
		}
		return build(key, DoesNotExist, nil)
	}
	key := p.next()
	if key.kind != tokIdent {
		return Requirement{}, unexpected(key, "identifier or '!'")
	}
	switch t := p.peek(); t.kind {
	case tokEOF, tokComma:
		return build(key, Exists, nil)
	case tokEq, tokDoubleEq, tokNotEq:
		p.next()
		op := Equals
		if t.kind == tokNotEq {
			op = NotEquals
		}
		v := p.peek()
		switch v.kind {
		case tokIdent:
			p.next()
			return build(key, op, []string{v.text})
		case tokEOF, tokComma:
			// "app=" selects the empty value, as in Kubernetes.
			return build(key, op, []string{""})
		}
		return Requirement{}, unexpected(v, "identifier")
	case tokIdent:
		var op Operator
		switch t.text {
		case "in":
			op = In
		case "notin":
			op = NotIn
		default:
			return Requirement{}, unexpected(t, "'=', '==', '!=', 'in', 'notin', ',' or end of string")
		}
		p.next()
		values, err := p.values()
		if err != nil {
			return Requirement{}, err
		}
		return build(key, op, values)
	default:
		return Requirement{}, unexpected(t, "'=', '==', '!=', 'in', 'notin', ',' or end of string")
	}
}

// values parses "(v1, v2, ...)".
func (p *parser) values() ([]string, error) {
	if t := p.next(); t.kind != tokOpen {
		return nil, unexpected(t, "'('")
	}
	var vs []string
	for {
		v := p.next()
		if v.kind != tokIdent {
			return nil, unexpected(v, "identifier")
		}
		vs = append(vs, v.text)
		switch t := p.next(); t.kind {
		case tokClose:
			return vs, nil
		case tokComma:
		default:
			return nil, unexpected(t, "',' or ')'")
		}
	}
}

// build validates a parsed requirement, reporting problems at the key.
func build(key token, op Operator, values []string) (Requirement, error) {
	r, err := NewRequirement(key.text, op, values)
	if err != nil {
		return Requirement{}, &ParseError{Pos: key.pos, Msg: strings.TrimSpace(err.Error())}
	}
	return r, nil
}
