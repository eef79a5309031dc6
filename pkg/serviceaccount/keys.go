package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	jose "github.com/go-jose/go-jose/v4"
)

// LoadPrivateKeyFile reads the signing key: one PEM "PRIVATE KEY" block
// (PKCS#8) holding an ECDSA P-256 or Ed25519 key.
func LoadPrivateKeyFile(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read service account private key: %w", err)
	}
	k, err := ParsePrivateKeyPEM(b)
	if err != nil {
		return nil, fmt.Errorf("service account private key %s: %w", path, err)
	}
	return k, nil
}

// ParsePrivateKeyPEM parses a PEM PKCS#8 private key of a supported type.
func ParsePrivateKeyPEM(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	if block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("PEM block is %q, want \"PRIVATE KEY\" (PKCS#8)", block.Type)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse PKCS#8 key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key type %T cannot sign", k)
	}
	if _, err := algorithm(s.Public()); err != nil {
		return nil, err
	}
	return s, nil
}

// LoadPublicKeysFiles reads every PEM "PUBLIC KEY" block (PKIX) of every
// file: verification accepts tokens signed by any of them, so a key can
// be rotated by listing the old and new public keys.
func LoadPublicKeysFiles(paths ...string) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read service account public keys: %w", err)
		}
		ks, err := ParsePublicKeysPEM(b)
		if err != nil {
			return nil, fmt.Errorf("service account public keys %s: %w", p, err)
		}
		keys = append(keys, ks...)
	}
	if len(keys) == 0 {
		return nil, errors.New("no service account public key files given")
	}
	return keys, nil
}

// ParsePublicKeysPEM parses one or more PEM public keys. A private key
// block is accepted too (its public half is used), as Kubernetes does,
// so one file can serve both to sign and verify.
func ParsePublicKeysPEM(b []byte) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		var pub crypto.PublicKey
		switch block.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse PKIX public key %d: %w", len(keys)+1, err)
			}
			pub = k
		case "PRIVATE KEY":
			k, err := ParsePrivateKeyPEM(pem.EncodeToMemory(block))
			if err != nil {
				return nil, fmt.Errorf("key %d: %w", len(keys)+1, err)
			}
			pub = k.Public()
		default:
			return nil, fmt.Errorf("PEM block %d is %q, want \"PUBLIC KEY\"", len(keys)+1, block.Type)
		}
		if _, err := algorithm(pub); err != nil {
			return nil, fmt.Errorf("key %d: %w", len(keys)+1, err)
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM block found")
	}
	return keys, nil
}

// algorithm is the JWS algorithm a key signs with: ES256 for ECDSA P-256,
// EdDSA for Ed25519; other keys are refused.
func algorithm(pub crypto.PublicKey) (jose.SignatureAlgorithm, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return "", fmt.Errorf("ECDSA key on curve %s, want P-256", k.Curve.Params().Name)
		}
		return jose.ES256, nil
	case ed25519.PublicKey:
		return jose.EdDSA, nil
	default:
		return "", fmt.Errorf("unsupported key type %T (want ECDSA P-256 or Ed25519)", pub)
	}
}

// KeyID is the key's RFC 7638 thumbprint (SHA-256, base64url): the kid
// header a token carries, so a verifier with several keys tries one.
func KeyID(pub crypto.PublicKey) (string, error) {
	t, err := (&jose.JSONWebKey{Key: pub}).Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("key thumbprint: %w", err)
	}
	return base64URL(t), nil
}

// EncodePrivateKeyPEM encodes a key as PEM PKCS#8 (the format
// LoadPrivateKeyFile reads); for tools and tests that make keys.
func EncodePrivateKeyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("marshal PKCS#8 key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// EncodePublicKeyPEM encodes a public key as PEM PKIX.
func EncodePublicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("marshal PKIX key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}
