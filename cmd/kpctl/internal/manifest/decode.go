// Package manifest converts between Kubernetes-style manifests (YAML or
// JSON documents with apiVersion, kind, metadata, spec, status at the top
// level) and kplane API objects.
//
// The conversion is generic: a document is turned into JSON, apiVersion
// and kind are removed, the rest is wrapped as {"<oneof field>": {...}} and
// unmarshalled into kplanev1.Object. Adding a kind to the API therefore
// needs no change here.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/cmd/kpctl/internal/kinds"
	"github.com/kplane/kplane/pkg/apijson"
)

// Stdin is the source name used for documents read from standard input.
const Stdin = "STDIN"

// Document is one object read from a manifest.
type Document struct {
	// Source is the file the document came from, or Stdin.
	Source string
	// Index is the 1-based position of the document in its source.
	Index int
	// Item is the 0-based position inside a List document, or -1.
	Item int
	// Object is the decoded object.
	Object *kplanev1.Object
}

// Where describes the document's position for messages:
// "pod.yaml: document 2" or "list.yaml: document 1, items[3]".
func (d *Document) Where() string {
	return where(d.Source, d.Index, d.Item)
}

func where(source string, index, item int) string {
	s := fmt.Sprintf("%s: document %d", source, index)
	if item >= 0 {
		s += fmt.Sprintf(", items[%d]", item)
	}
	return s
}

// Error is a problem with one document of a manifest.
type Error struct {
	Source string
	Index  int
	Item   int
	Err    error
}

func (e *Error) Error() string { return where(e.Source, e.Index, e.Item) + ": " + e.Err.Error() }

func (e *Error) Unwrap() error { return e.Err }

// ReadPaths reads every manifest named by paths: files, directories (their
// .yaml, .yml and .json files, in name order, not recursive) and "-" for
// stdin.
func ReadPaths(paths []string, stdin io.Reader) ([]*Document, error) {
	var docs []*Document
	for _, p := range paths {
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			var data []byte
			source := f
			if f == "-" {
				source = Stdin
				data, err = io.ReadAll(stdin)
			} else {
				data, err = os.ReadFile(f)
			}
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", source, err)
			}
			d, err := Decode(source, data)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
		}
	}
	if len(docs) == 0 {
		return nil, errors.New("no objects found in the given manifests")
	}
	return docs, nil
}

func expand(p string) ([]string, error) {
	if p == "-" {
		return []string{p}, nil
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("the path %q does not exist", p)
	}
	if !fi.IsDir() {
		return []string{p}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, fmt.Errorf("read directory %s: %w", p, err)
	}
	var files []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
			if !e.IsDir() {
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("no .yaml, .yml or .json files in directory %s", p)
	}
	return files, nil
}

// Decode parses every document of one source (YAML or JSON; YAML documents
// separated by "---" lines). Empty documents are skipped; a "List"
// document contributes its items.
func Decode(source string, data []byte) ([]*Document, error) {
	var docs []*Document
	for i, chunk := range split(data) {
		index := i + 1
		raw, err := yaml.YAMLToJSONStrict(chunk.data)
		if err != nil {
			return nil, &Error{source, index, -1, yamlError(err, chunk.line)}
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, &Error{source, index, -1, err}
		}
		if v == nil {
			continue // only comments or whitespace
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &Error{source, index, -1, errors.New("expected an object with kind, metadata and spec")}
		}
		if m["kind"] == "List" {
			items, ok := m["items"].([]any)
			if !ok {
				return nil, &Error{source, index, -1, errors.New("items: a List needs a list of items")}
			}
			for j, it := range items {
				im, ok := it.(map[string]any)
				if !ok {
					return nil, &Error{source, index, j, errors.New("expected an object")}
				}
				obj, err := FromMap(im)
				if err != nil {
					return nil, &Error{source, index, j, err}
				}
				docs = append(docs, &Document{Source: source, Index: index, Item: j, Object: obj})
			}
			continue
		}
		obj, err := FromMap(m)
		if err != nil {
			return nil, &Error{source, index, -1, err}
		}
		docs = append(docs, &Document{Source: source, Index: index, Item: -1, Object: obj})
	}
	return docs, nil
}

// FromMap converts one decoded manifest (numbers as json.Number) into an
// Object. m is modified.
func FromMap(m map[string]any) (*kplanev1.Object, error) {
	kind, ok := m["kind"].(string)
	if !ok || kind == "" {
		return nil, errors.New("kind: Required value: every object needs a kind, e.g. kind: Pod")
	}
	if av, ok := m["apiVersion"]; ok {
		if _, ok := av.(string); !ok {
			return nil, errors.New("apiVersion: expected a string")
		}
	}
	info := kplanev1.LookupKind(kind)
	if info == nil {
		if k, err := kinds.Resolve(kind); err == nil {
			return nil, fmt.Errorf("kind: unknown kind %q (did you mean %q?)", kind, k.Name)
		}
		return nil, fmt.Errorf("kind: %s", kplanev1.UnknownKindError(kind))
	}
	delete(m, "apiVersion")
	delete(m, "kind")
	return apijson.ObjectFromMap(kind, m, apijson.DecodeOptions{})
}

type chunk struct {
	data []byte
	line int // 1-based line of the chunk's first line in the source
}

// split cuts a YAML stream at document separators ("---" at the start of a
// line), remembering where each document starts so errors can name
// absolute line numbers.
func split(data []byte) []chunk {
	var out []chunk
	var cur bytes.Buffer
	start, n := 1, 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), len(data)+1)
	for sc.Scan() {
		n++
		line := sc.Text()
		if line == "---" || strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "---\t") {
			out = append(out, chunk{append([]byte(nil), cur.Bytes()...), start})
			cur.Reset()
			start = n + 1
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	return append(out, chunk{cur.Bytes(), start})
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// yamlError makes a YAML parser error one line with line numbers counted
// from the start of the file rather than of the document.
func yamlError(err error, offset int) error {
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = yamlLine.ReplaceAllStringFunc(msg, func(s string) string {
		n, _ := strconv.Atoi(s[len("line "):])
		return "line " + strconv.Itoa(n+offset-1)
	})
	msg = strings.Join(strings.Fields(msg), " ")
	return fmt.Errorf("invalid YAML: %s", msg)
}
