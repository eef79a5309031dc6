package kplanev1

// The storage vocabulary (core/v1 PersistentVolume, PersistentVolumeClaim;
// storage.k8s.io/v1 StorageClass), spelled as Kubernetes spells it.

// PersistentVolume phases (status.phase).
const (
	VolumePending   = "Pending"
	VolumeAvailable = "Available"
	VolumeBound     = "Bound"
	VolumeReleased  = "Released"
	VolumeFailed    = "Failed"
)

// PersistentVolumeClaim phases (status.phase).
const (
	ClaimPending = "Pending"
	ClaimBound   = "Bound"
	ClaimLost    = "Lost"
)

// Reclaim policies (spec.persistentVolumeReclaimPolicy, reclaimPolicy).
const (
	ReclaimRetain  = "Retain"
	ReclaimDelete  = "Delete"
	ReclaimRecycle = "Recycle"
)

// Volume binding modes (StorageClass volumeBindingMode).
const (
	VolumeBindingImmediate            = "Immediate"
	VolumeBindingWaitForFirstConsumer = "WaitForFirstConsumer"
)

// Access modes and volume modes.
const (
	ReadWriteOnce    = "ReadWriteOnce"
	ReadOnlyMany     = "ReadOnlyMany"
	ReadWriteMany    = "ReadWriteMany"
	ReadWriteOncePod = "ReadWriteOncePod"

	VolumeModeFilesystem = "Filesystem"
	VolumeModeBlock      = "Block"
)

// ResourceStorage is the resource name of a volume's size.
const ResourceStorage = "storage"

// Finalizers that keep storage in use from disappearing.
const (
	FinalizerPVCProtection = "kubernetes.io/pvc-protection"
	FinalizerPVProtection  = "kubernetes.io/pv-protection"
)

// Annotations of the binding and provisioning protocol.
const (
	// AnnotationDefaultStorageClass ("true") marks the class used for
	// claims that name none.
	AnnotationDefaultStorageClass = "storageclass.kubernetes.io/is-default-class"
	// AnnotationSelectedNode on a claim is the node the scheduler chose
	// for its first consumer (WaitForFirstConsumer).
	AnnotationSelectedNode = "volume.kubernetes.io/selected-node"
	// AnnotationProvisionedBy on a volume names the provisioner that made it.
	AnnotationProvisionedBy = "pv.kubernetes.io/provisioned-by"
	// AnnotationBoundByController ("yes") on a volume or claim says the
	// controller, not a user, bound it; only such a binding is undone
	// when the other side turns out bound elsewhere.
	AnnotationBoundByController = "pv.kubernetes.io/bound-by-controller"
	// AnnotationStorageProvisioner on a claim names the provisioner asked
	// to make its volume.
	AnnotationStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
)

// LabelHostname is the node label a node-local volume's affinity names.
const LabelHostname = "kubernetes.io/hostname"

// ProvisionerLocalPath is kplane's dynamic provisioner: a directory per
// volume under pvctl's --storage-root.
const ProvisionerLocalPath = "kplane.io/local-path"
