package cloudsimv1

// ProviderPrefix starts every cloudsim instance's provider ID
// (kplane-sim://<instance id>), a Node's spec.providerID.
const ProviderPrefix = "kplane-sim://"
