// Package printers holds the table columns kubectl shows for each kind and
// renders them: kpctl prints its tables with it and the apiserver's REST
// side answers Table requests (kubectl get) with the same columns, so both
// print alike.
package printers

import (
	"bufio"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	kplanev1 "github.com/kplane/kplane/proto/kplane/v1"
)

// TableOptions controls how a table is printed.
type TableOptions struct {
	// Wide adds the extra columns of "-o wide".
	Wide bool
	// WithNamespace adds a leading NAMESPACE column (for -A).
	WithNamespace bool
	// NoHeaders leaves out the header line (e.g. rows printed by a watch).
	NoHeaders bool
	// Now is the clock AGE columns are computed against; it is read once
	// per printed batch.
	Now func() time.Time
}

// columns is the table layout of one kind.
type columns struct {
	headers []string
	wide    []string
	// row returns the cells for headers and for wide.
	row func(o *kplanev1.Object, now time.Time) (cells, wide []string)
}

var tables = map[string]columns{
	"Pod":                   {[]string{"NAME", "READY", "STATUS", "RESTARTS", "AGE"}, []string{"IP", "NODE", "NOMINATED NODE"}, podRow},
	"ReplicaSet":            {[]string{"NAME", "DESIRED", "CURRENT", "READY", "AGE"}, []string{"CONTAINERS", "IMAGES", "SELECTOR"}, replicaSetRow},
	"Deployment":            {[]string{"NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"}, []string{"CONTAINERS", "IMAGES", "SELECTOR"}, deploymentRow},
	"ReplicationController": {[]string{"NAME", "DESIRED", "CURRENT", "READY", "AGE"}, []string{"CONTAINERS", "IMAGES", "SELECTOR"}, replicationControllerRow},
	"StatefulSet":           {[]string{"NAME", "READY", "AGE"}, []string{"CONTAINERS", "IMAGES"}, statefulSetRow},
	"DaemonSet":             {[]string{"NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE SELECTOR", "AGE"}, []string{"CONTAINERS", "IMAGES", "SELECTOR"}, daemonSetRow},
	"ControllerRevision":    {[]string{"NAME", "CONTROLLER", "REVISION", "AGE"}, nil, controllerRevisionRow},
	"Node":                  {[]string{"NAME", "STATUS", "ROLES", "AGE", "VERSION"}, []string{"INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"}, nodeRow},
	"Service":               {[]string{"NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"}, []string{"SELECTOR"}, serviceRow},
	"Endpoints":             {[]string{"NAME", "ENDPOINTS", "AGE"}, nil, endpointsRow},
	"Job":                   {[]string{"NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"}, []string{"CONTAINERS", "IMAGES", "SELECTOR"}, jobRow},
	"CronJob":               {[]string{"NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE", "AGE"}, []string{"CONTAINERS", "IMAGES", "SELECTOR"}, cronJobRow},
	"PersistentVolume":      {[]string{"NAME", "CAPACITY", "ACCESS MODES", "RECLAIM POLICY", "STATUS", "CLAIM", "STORAGECLASS", "REASON", "AGE"}, []string{"VOLUMEMODE"}, pvRow},
	"PersistentVolumeClaim": {[]string{"NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS MODES", "STORAGECLASS", "AGE"}, []string{"VOLUMEMODE"}, pvcRow},
	"PodDisruptionBudget":   {[]string{"NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"}, nil, podDisruptionBudgetRow},
	"PriorityClass":         {[]string{"NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"}, nil, priorityClassRow},
	"StorageClass":          {[]string{"NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"}, nil, storageClassRow},
	"ServiceAccount":        {[]string{"NAME", "SECRETS", "AGE"}, nil, serviceAccountRow},
	"Secret":                {[]string{"NAME", "TYPE", "DATA", "AGE"}, nil, secretRow},
	"Lease":                 {[]string{"NAME", "HOLDER", "AGE"}, nil, leaseRow},
	"Namespace":             {[]string{"NAME", "STATUS", "AGE"}, nil, namespaceRow},
	"Role":                  {[]string{"NAME", "CREATED AT"}, nil, roleRow},
	"ClusterRole":           {[]string{"NAME", "CREATED AT"}, nil, roleRow},
	"RoleBinding":           {[]string{"NAME", "ROLE", "AGE"}, []string{"USERS", "GROUPS", "SERVICEACCOUNTS"}, bindingRow},
	"ClusterRoleBinding":    {[]string{"NAME", "ROLE", "AGE"}, []string{"USERS", "GROUPS", "SERVICEACCOUNTS"}, bindingRow},
	"Event":                 {[]string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}, []string{"SOURCE", "FIRST SEEN", "COUNT", "NAME"}, eventRow},
}

// genericTable serves kinds without a layout of their own.
var genericTable = columns{[]string{"NAME", "AGE"}, nil, func(o *kplanev1.Object, now time.Time) ([]string, []string) {
	m := o.Meta()
	return []string{m.GetName(), Age(m.GetCreationTimestamp(), now)}, nil
}}

func tableFor(kind string) columns {
	if c, ok := tables[kind]; ok {
		return c
	}
	return genericTable
}

// Table prints objects of one kind as an aligned table.
func Table(w io.Writer, kind string, objs []*kplanev1.Object, opts TableOptions) error {
	return NewStream(w, kind, opts).Print(objs)
}

// Stream prints table rows in batches, as a watch delivers them, keeping
// later rows aligned with the columns of the earlier ones. The header is
// printed with the first batch unless NoHeaders is set.
type Stream struct {
	w       io.Writer
	c       columns
	opts    TableOptions
	widths  []int
	started bool
}

// NewStream returns a Stream for objects of kind.
func NewStream(w io.Writer, kind string, opts TableOptions) *Stream {
	return &Stream{w: w, c: tableFor(kind), opts: opts}
}

// Print writes one batch of rows (with the header, the first time).
func (s *Stream) Print(objs []*kplanev1.Object) error {
	return s.write(s.rows(objs))
}

// rows turns a batch into cells (with the header, the first time),
// widening the columns to fit them.
func (s *Stream) rows(objs []*kplanev1.Object) [][]string {
	rows := make([][]string, 0, len(objs)+1)
	if !s.started && !s.opts.NoHeaders {
		h := append([]string(nil), s.c.headers...)
		if s.opts.Wide {
			h = append(h, s.c.wide...)
		}
		if s.opts.WithNamespace {
			h = append([]string{"NAMESPACE"}, h...)
		}
		rows = append(rows, s.measure(h))
	}
	s.started = true
	now := time.Now()
	if s.opts.Now != nil {
		now = s.opts.Now()
	}
	for _, o := range objs {
		cells, wide := s.c.row(o, now)
		if s.opts.Wide {
			cells = append(cells, wide...)
		}
		if s.opts.WithNamespace {
			cells = append([]string{o.Meta().GetNamespace()}, cells...)
		}
		rows = append(rows, s.measure(cells))
	}
	return rows
}

// cellSpaces replaces what would break a table's layout inside a cell.
var cellSpaces = strings.NewReplacer("\t", " ", "\n", " ")

// measure cleans a row's cells and widens the columns to fit them.
func (s *Stream) measure(r []string) []string {
	for i, cell := range r {
		if strings.ContainsAny(cell, "\t\n") {
			r[i] = cellSpaces.Replace(cell)
		}
		if i >= len(s.widths) {
			s.widths = append(s.widths, 0)
		}
		s.widths[i] = max(s.widths[i], utf8.RuneCountInString(r[i]))
	}
	return r
}

// write prints rows padded to the columns' widths.
func (s *Stream) write(rows [][]string) error {
	bw := bufio.NewWriterSize(s.w, 64<<10)
	for _, r := range rows {
		for i, cell := range r {
			_, _ = bw.WriteString(cell)
			if i < len(r)-1 {
				pad := s.widths[i] - utf8.RuneCountInString(cell) + 3
				for pad > 0 {
					n := min(pad, len(spaces))
					_, _ = bw.WriteString(spaces[:n])
					pad -= n
				}
			}
		}
		_ = bw.WriteByte('\n')
	}
	// A failed write is kept by bw and returned here.
	return bw.Flush()
}

var spaces = strings.Repeat(" ", 64)

// Builder collects the rows of one kind's table batch by batch (the
// pages of a List, so their objects need not be kept until the end) and
// prints them aligned to the widest cell of every batch.
type Builder struct {
	s    *Stream
	rows [][]string
	n    int
}

// NewBuilder returns a Builder for objects of kind, printing to w.
func NewBuilder(w io.Writer, kind string, opts TableOptions) *Builder {
	return &Builder{s: NewStream(w, kind, opts)}
}

// Add turns objs into rows.
func (b *Builder) Add(objs []*kplanev1.Object) {
	b.rows = append(b.rows, b.s.rows(objs)...)
	b.n += len(objs)
}

// Len is how many objects were added.
func (b *Builder) Len() int { return b.n }

// Write prints the table.
func (b *Builder) Write() error { return b.s.write(b.rows) }

// Columns returns the column headers kubectl shows for kind, and the
// extra ones of -o wide.
func Columns(kind string) (headers, wide []string) {
	c := tableFor(kind)
	return c.headers, c.wide
}

// Row returns the cells of o for the headers and for the wide headers of
// its kind, AGE columns counted from now.
func Row(o *kplanev1.Object, now time.Time) (cells, wide []string) {
	return tableFor(o.KindName()).row(o, now)
}
