package client

import kplanev1 "github.com/kplane/kplane/proto/kplane/v1"

// Shorthands for For[T], one per kind of the API.

// Namespaces returns typed access to Namespace objects.
func Namespaces(c *Client) *Typed[*kplanev1.Namespace] { return For[*kplanev1.Namespace](c) }

// Nodes returns typed access to Node objects.
func Nodes(c *Client) *Typed[*kplanev1.Node] { return For[*kplanev1.Node](c) }

// Pods returns typed access to Pod objects.
func Pods(c *Client) *Typed[*kplanev1.Pod] { return For[*kplanev1.Pod](c) }

// ReplicaSets returns typed access to ReplicaSet objects.
func ReplicaSets(c *Client) *Typed[*kplanev1.ReplicaSet] { return For[*kplanev1.ReplicaSet](c) }

// ReplicationControllers returns typed access to ReplicationController objects.
func ReplicationControllers(c *Client) *Typed[*kplanev1.ReplicationController] {
	return For[*kplanev1.ReplicationController](c)
}

// Services returns typed access to Service objects.
func Services(c *Client) *Typed[*kplanev1.Service] { return For[*kplanev1.Service](c) }

// Endpoints returns typed access to Endpoints objects.
func Endpoints(c *Client) *Typed[*kplanev1.Endpoints] { return For[*kplanev1.Endpoints](c) }

// Jobs returns typed access to Job objects.
func Jobs(c *Client) *Typed[*kplanev1.Job] { return For[*kplanev1.Job](c) }

// CronJobs returns typed access to CronJob objects.
func CronJobs(c *Client) *Typed[*kplanev1.CronJob] { return For[*kplanev1.CronJob](c) }

// PersistentVolumes returns typed access to PersistentVolume objects.
func PersistentVolumes(c *Client) *Typed[*kplanev1.PersistentVolume] {
	return For[*kplanev1.PersistentVolume](c)
}

// PersistentVolumeClaims returns typed access to PersistentVolumeClaim objects.
func PersistentVolumeClaims(c *Client) *Typed[*kplanev1.PersistentVolumeClaim] {
	return For[*kplanev1.PersistentVolumeClaim](c)
}

// StorageClasses returns typed access to StorageClass objects.
func StorageClasses(c *Client) *Typed[*kplanev1.StorageClass] { return For[*kplanev1.StorageClass](c) }

// ServiceAccounts returns typed access to ServiceAccount objects.
func ServiceAccounts(c *Client) *Typed[*kplanev1.ServiceAccount] {
	return For[*kplanev1.ServiceAccount](c)
}

// Secrets returns typed access to Secret objects.
func Secrets(c *Client) *Typed[*kplanev1.Secret] { return For[*kplanev1.Secret](c) }

// Leases returns typed access to Lease objects.
func Leases(c *Client) *Typed[*kplanev1.Lease] { return For[*kplanev1.Lease](c) }

// Events returns typed access to Event objects.
func Events(c *Client) *Typed[*kplanev1.Event] { return For[*kplanev1.Event](c) }

// Deployments returns typed access to Deployment objects.
func Deployments(c *Client) *Typed[*kplanev1.Deployment] { return For[*kplanev1.Deployment](c) }

// StatefulSets returns typed access to StatefulSet objects.
func StatefulSets(c *Client) *Typed[*kplanev1.StatefulSet] { return For[*kplanev1.StatefulSet](c) }

// DaemonSets returns typed access to DaemonSet objects.
func DaemonSets(c *Client) *Typed[*kplanev1.DaemonSet] { return For[*kplanev1.DaemonSet](c) }

// ControllerRevisions returns typed access to ControllerRevision objects.
func ControllerRevisions(c *Client) *Typed[*kplanev1.ControllerRevision] {
	return For[*kplanev1.ControllerRevision](c)
}
