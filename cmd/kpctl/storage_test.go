package main

import (
	"strings"
	"testing"
)

const storageManifests = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kplane.io/local-path
reclaimPolicy: Delete
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-1
spec:
  capacity:
    storage: 1Gi
  accessModes: [ReadWriteOnce]
  storageClassName: local
  hostPath:
    path: /srv/pv-1
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local
  resources:
    requests:
      storage: 1Gi
---
apiVersion: v1
kind: Pod
metadata:
  name: db-0
spec:
  containers:
  - name: db
    image: busybox
    command: [sleep, "1000"]
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: data
`

func TestStorageCommands(t *testing.T) {
	c := newCluster(t)
	c.must(storageManifests, "apply", "-f", "-")

	out := c.must("", "get", "pv,pvc,storageclass")
	for _, want := range []string{
		"NAME   CAPACITY   ACCESS MODES   RECLAIM POLICY   STATUS    CLAIM   STORAGECLASS   REASON   AGE",
		"pv-1   1Gi        RWO            Retain           Pending",
		"NAME   STATUS    VOLUME   CAPACITY   ACCESS MODES   STORAGECLASS   AGE",
		"data   Pending",
		"local (default)   kplane.io/local-path   Delete          WaitForFirstConsumer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("get pv,pvc,storageclass lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n\n"); n != 2 {
		t.Errorf("want three tables separated by blank lines, got %d separators:\n%s", n, out)
	}

	desc := c.must("", "describe", "pvc", "data")
	if !strings.Contains(desc, "Used By:") || !strings.Contains(desc, "db-0") {
		t.Errorf("describe pvc lacks Used By db-0:\n%s", desc)
	}

	if e := c.fails("", "get", "pv,pvc", "data"); !strings.Contains(e, "names cannot be given with several kinds") {
		t.Errorf("get pv,pvc data: %s", e)
	}
	if e := c.fails("", "get", "pv,nosuchkind"); !strings.Contains(e, "nosuchkind") {
		t.Errorf("get pv,nosuchkind: %s", e)
	}
}
