package kplanev1

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"
	"unicode"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
)

// descriptorSet is the proto files of this package compiled with their
// source info (`make proto` writes it with buf build). protoc-gen-go drops
// comments from the descriptors it embeds in the generated code, and the
// REST API's OpenAPI documents (kubectl explain) describe each field with
// its proto comment, so the comments are shipped beside the code.
//
//go:embed descriptors.binpb
var descriptorSet []byte

var (
	docsOnce sync.Once
	docs     map[protoreflect.FullName]string
	docsErr  error
)

// Doc returns the leading comment of the message or field named name
// ("kplane.v1.Container", "kplane.v1.Container.image"), one paragraph,
// with proto field names (restart_policy) written as their JSON names
// (restartPolicy), as a Kubernetes user reads them. It is "" for an
// element without a comment.
func Doc(name protoreflect.FullName) string {
	docsOnce.Do(func() { docs, docsErr = loadDocs(descriptorSet) })
	if docsErr != nil {
		// The set is generated with the code it describes; a set that does
		// not parse is a build mistake, and documentation is not worth
		// failing a request over.
		return ""
	}
	return docs[name]
}

// Source-info path elements (descriptor.proto field numbers).
const (
	fileMessageType    = 4
	messageField       = 2
	messageNestedType  = 3
	messageEnumType    = 4
	fileEnumType       = 5
	enumValueFieldPath = 2
)

func loadDocs(b []byte) (map[protoreflect.FullName]string, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("parse the embedded descriptor set: %w", err)
	}
	out := map[protoreflect.FullName]string{}
	for _, f := range set.GetFile() {
		comments := map[string]string{}
		for _, loc := range f.GetSourceCodeInfo().GetLocation() {
			if c := loc.GetLeadingComments(); c != "" {
				comments[pathKey(loc.GetPath())] = c
			}
		}
		pkg := protoreflect.FullName(f.GetPackage())
		for i, m := range f.GetMessageType() {
			addMessageDocs(out, comments, pkg, m, []int32{fileMessageType, int32(i)})
		}
		for i, e := range f.GetEnumType() {
			addEnumDocs(out, comments, pkg, e, []int32{fileEnumType, int32(i)})
		}
	}
	return out, nil
}

func addMessageDocs(out map[protoreflect.FullName]string, comments map[string]string, parent protoreflect.FullName, m *descriptorpb.DescriptorProto, path []int32) {
	name := parent.Append(protoreflect.Name(m.GetName()))
	jsonNames := map[string]string{}
	for _, f := range m.GetField() {
		jsonNames[f.GetName()] = f.GetJsonName()
	}
	set := func(n protoreflect.FullName, p []int32) {
		if c, ok := comments[pathKey(p)]; ok {
			out[n] = docText(c, jsonNames)
		}
	}
	set(name, path)
	for i, f := range m.GetField() {
		set(name.Append(protoreflect.Name(f.GetName())), child(path, messageField, i))
	}
	for i, n := range m.GetNestedType() {
		addMessageDocs(out, comments, name, n, child(path, messageNestedType, i))
	}
	for i, e := range m.GetEnumType() {
		addEnumDocs(out, comments, name, e, child(path, messageEnumType, i))
	}
}

func addEnumDocs(out map[protoreflect.FullName]string, comments map[string]string, parent protoreflect.FullName, e *descriptorpb.EnumDescriptorProto, path []int32) {
	name := parent.Append(protoreflect.Name(e.GetName()))
	if c, ok := comments[pathKey(path)]; ok {
		out[name] = docText(c, nil)
	}
	for i, v := range e.GetValue() {
		if c, ok := comments[pathKey(child(path, enumValueFieldPath, i))]; ok {
			// Enum values are scoped beside their enum, as in protoreflect.
			out[parent.Append(protoreflect.Name(v.GetName()))] = docText(c, nil)
		}
	}
}

func child(path []int32, elems ...int) []int32 {
	out := append([]int32(nil), path...)
	for _, e := range elems {
		out = append(out, int32(e))
	}
	return out
}

func pathKey(p []int32) string {
	return fmt.Sprint(p)
}

// docText joins a comment's lines into one paragraph and writes the
// message's own proto field names as their JSON names, so "node_name is
// set by the scheduler" reads "nodeName is set by the scheduler".
func docText(c string, jsonNames map[string]string) string {
	words := strings.Fields(c)
	for i, w := range words {
		notWord := func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' }
		start := strings.IndexFunc(w, func(r rune) bool { return !notWord(r) })
		if start < 0 {
			continue
		}
		core := strings.TrimRightFunc(w[start:], notWord)
		if !isSnakeName(core) {
			continue
		}
		j, ok := jsonNames[core]
		if !ok {
			// A field of another message (failure_threshold of a probe):
			// its JSON name is its lowerCamelCase, as protoc derives it.
			j = lowerCamel(core)
		}
		words[i] = w[:start] + j + w[start+len(core):]
	}
	return strings.Join(words, " ")
}

// lowerCamel is protoc's JSON name of a snake_case field name.
func lowerCamel(s string) string {
	var b strings.Builder
	upper := false
	for _, r := range s {
		switch {
		case r == '_':
			upper = true
		case upper:
			b.WriteRune(unicode.ToUpper(r))
			upper = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isSnakeName reports whether w is a proto field name with an underscore
// (node_name): lower-case letters, digits and underscores, a letter first.
func isSnakeName(w string) bool {
	if w == "" || w[0] < 'a' || w[0] > 'z' || !strings.Contains(w, "_") {
		return false
	}
	for _, r := range w {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}
