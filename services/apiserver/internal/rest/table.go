package rest

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

	"github.com/kplane/kplane/pkg/printers"
)

// tableRequested reports whether the client asked for server-side
// printing (kubectl get does): Accept names meta.k8s.io/v1 Table.
func tableRequested(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		fields := strings.Split(part, ";")
		params := map[string]string{}
		for _, f := range fields[1:] {
			if k, v, ok := strings.Cut(strings.TrimSpace(f), "="); ok {
				params[k] = v
			}
		}
		if strings.TrimSpace(fields[0]) == "application/json" && params["as"] == "Table" && params["g"] == "meta.k8s.io" && params["v"] == "v1" {
			return true
		}
	}
	return false
}

// table renders objs with the columns kpctl shows (pkg/printers), wide
// ones at priority 1 as kubectl expects for -o wide. Each row carries
// the object as includeObject asks: its metadata by default, all of it,
// or nothing.
func (h *Handler) table(r *http.Request, objs []*kplanev1.Object, lm metav1.ListMeta, headers bool) *metav1.Table {
	t := &metav1.Table{TypeMeta: metav1.TypeMeta{Kind: "Table", APIVersion: "meta.k8s.io/v1"}, ListMeta: lm, Rows: []metav1.TableRow{}}
	kind := ""
	if len(objs) > 0 {
		kind = objs[0].KindName()
	}
	if rk := h.pathKind(r); rk != "" {
		kind = rk
	}
	if headers {
		names, wide := printers.Columns(kind)
		for i, n := range names {
			c := metav1.TableColumnDefinition{Name: n, Type: "string"}
			if i == 0 && n == "NAME" {
				c.Format = "name"
			}
			t.ColumnDefinitions = append(t.ColumnDefinitions, c)
		}
		for _, n := range wide {
			t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: n, Type: "string", Priority: 1})
		}
	}
	include := r.URL.Query().Get("includeObject")
	now := time.Now()
	for _, o := range objs {
		cells, wide := printers.Row(o, now)
		row := metav1.TableRow{}
		for _, c := range append(cells, wide...) {
			row.Cells = append(row.Cells, c)
		}
		if include != "None" {
			row.Object = rowObject(o, include == "Object")
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// writeTable answers a Table request.
func (h *Handler) writeTable(w http.ResponseWriter, r *http.Request, objs []*kplanev1.Object, lm metav1.ListMeta) {
	if s := checkIncludeObject(r); s != nil {
		writeStatus(w, s)
		return
	}
	writeJSON(w, http.StatusOK, h.table(r, objs, lm, true))
}

func checkIncludeObject(r *http.Request) *metav1.Status {
	switch v := r.URL.Query().Get("includeObject"); v {
	case "", "None", "Metadata", "Object":
		return nil
	default:
		return badRequest(`includeObject: Unsupported value: %q: supported values: "Metadata", "None", "Object"`, v)
	}
}

// pathKind is the kind the request's URL names, so an empty list still
// gets its kind's columns.
func (h *Handler) pathKind(r *http.Request) string {
	segs := splitPath(r.URL.Path)
	var gv string
	var rest []string
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		gv, rest = segs[1], segs[2:]
	case len(segs) >= 3 && segs[0] == "apis":
		gv, rest = segs[1]+"/"+segs[2], segs[3:]
	default:
		return ""
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		if res, ok := h.byGV[gv][rest[2]]; ok && res.info.Namespaced {
			return res.Kind
		}
	}
	if len(rest) >= 1 {
		if res, ok := h.byGV[gv][rest[0]]; ok {
			return res.Kind
		}
	}
	return ""
}

// rowObject is the object a Table row carries: all of it, or its
// metadata as a PartialObjectMetadata (includeObject=Metadata, the default).
func rowObject(o *kplanev1.Object, full bool) runtime.RawExtension {
	m, err := objectMap(o)
	if err != nil {
		return runtime.RawExtension{}
	}
	var v any = m
	if !full {
		v = map[string]any{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": m["metadata"]}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return runtime.RawExtension{}
	}
	return runtime.RawExtension{Raw: raw}
}
