package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kplane/kplane/services/apiserver/testserver"
)

const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"

// tableWatch opens a watch asking for Table events and returns its events
// as they come, decoded.
func tableWatch(t *testing.T, base, path string) (<-chan map[string]any, *http.Response) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", tableAccept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	events := make(chan map[string]any, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				events <- ev
			}
		}
	}()
	return events, resp
}

func nextEvent(t *testing.T, events <-chan map[string]any) map[string]any {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("watch ended")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no watch event within 15s")
	}
	return nil
}

// TestRESTWatchTable: kubectl get -w asks a watch for Table events; each
// event's object is a Table of one row, the first with the column
// definitions, and includeObject decides what the row carries.
func TestRESTWatchTable(t *testing.T) {
	srv := testserver.Start(t)
	c := &restClient{t: t, base: "http://" + srv.Addr()}
	const coll = "/apis/apps/v1/namespaces/default/replicasets"
	c.do("POST", coll, "application/json", webRS(1))

	for _, tc := range []struct{ include, wantKind string }{
		{"", "PartialObjectMetadata"}, {"Metadata", "PartialObjectMetadata"}, {"Object", "ReplicaSet"}, {"None", ""},
	} {
		t.Run("includeObject="+tc.include, func(t *testing.T) {
			q := "?watch=1&timeoutSeconds=60"
			if tc.include != "" {
				q += "&includeObject=" + tc.include
			}
			events, resp := tableWatch(t, c.base, coll+q)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			check := func(ev map[string]any, typ string, headers bool) {
				t.Helper()
				if ev["type"] != typ {
					t.Fatalf("event %v, want %s", ev["type"], typ)
				}
				tab, _ := ev["object"].(map[string]any)
				if tab["kind"] != "Table" || tab["apiVersion"] != "meta.k8s.io/v1" {
					t.Fatalf("event object is not a Table: %v", tab)
				}
				cols, _ := tab["columnDefinitions"].([]any)
				if headers != (len(cols) > 0) {
					t.Errorf("%s: %d column definitions, want headers=%v", typ, len(cols), headers)
				}
				rows, _ := tab["rows"].([]any)
				if len(rows) != 1 {
					t.Fatalf("%s: %d rows, want 1", typ, len(rows))
				}
				row := rows[0].(map[string]any)
				if cells, _ := row["cells"].([]any); len(cells) < 4 || cells[0] != "web" {
					t.Errorf("%s: cells %v", typ, row["cells"])
				}
				obj, has := row["object"].(map[string]any)
				if tc.wantKind == "" {
					if has && len(obj) > 0 {
						t.Errorf("%s: includeObject=None row carries %v", typ, obj)
					}
					return
				}
				if obj["kind"] != tc.wantKind {
					t.Errorf("%s: row object kind %v, want %s", typ, obj["kind"], tc.wantKind)
				}
				if md, _ := obj["metadata"].(map[string]any); md["name"] != "web" {
					t.Errorf("%s: row object metadata %v", typ, obj["metadata"])
				}
				_, hasSpec := obj["spec"]
				if hasSpec != (tc.wantKind == "ReplicaSet") {
					t.Errorf("%s: row object has spec=%v", typ, hasSpec)
				}
			}
			check(nextEvent(t, events), "ADDED", true)
			c.do("PATCH", coll+"/web", "application/merge-patch+json", `{"metadata":{"labels":{"step":"`+tc.include+`x"}}}`)
			check(nextEvent(t, events), "MODIFIED", false)
		})
	}
	// A bad includeObject is refused before the watch starts, naming the
	// parameter, as for a list.
	bad := c.do("GET", coll+"?watch=1&includeObject=All", "", nil, "Accept", tableAccept)
	if bad.code != 400 || !strings.Contains(bad.str("message"), `includeObject: Unsupported value: "All"`) {
		t.Errorf("watch with includeObject=All: %d %s", bad.code, bad.raw)
	}
	// Without a Table Accept the parameter means nothing (Kubernetes
	// ignores it too): the watch starts.
	plain := c.do("GET", coll+"?watch=1&timeoutSeconds=1&includeObject=All", "", nil)
	if plain.code != 200 || !bytes.Contains(plain.raw, []byte(`"type":"ADDED"`)) {
		t.Errorf("plain watch with includeObject=All: %d %s", plain.code, plain.raw)
	}
}
