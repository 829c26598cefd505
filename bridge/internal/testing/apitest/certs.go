package apitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// credentials are the files the apiserver reads at start, written into
// one directory, and the CA clients verify the serving certificate with.
type credentials struct {
	caPEM                   []byte
	servingCert, servingKey string
	saPublic, saPrivate     string
}

// writeCredentials generates a CA, a serving certificate it signs for
// 127.0.0.1 and localhost, and the service-account signing key pair, all
// ECDSA P-256 (fast to generate), and writes them into dir.
func writeCredentials(dir string) (credentials, error) {
	caKey, caCert, caDER, err := newCA()
	if err != nil {
		return credentials{}, err
	}
	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return credentials{}, fmt.Errorf("serving key: %w", err)
	}
	tmpl := certTemplate("kube-apiserver")
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.DNSNames = []string{"localhost"}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	servingDER, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return credentials{}, fmt.Errorf("serving certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return credentials{}, fmt.Errorf("service-account key: %w", err)
	}
	c := credentials{
		caPEM:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		servingCert: filepath.Join(dir, "serving.crt"), servingKey: filepath.Join(dir, "serving.key"),
		saPublic: filepath.Join(dir, "sa.pub"), saPrivate: filepath.Join(dir, "sa.key"),
	}
	files := []struct {
		path  string
		block func() (*pem.Block, error)
	}{
		{c.servingCert, func() (*pem.Block, error) { return &pem.Block{Type: "CERTIFICATE", Bytes: servingDER}, nil }},
		{c.servingKey, func() (*pem.Block, error) { return privateKeyBlock(servingKey) }},
		{c.saPublic, func() (*pem.Block, error) { return publicKeyBlock(saKey) }},
		{c.saPrivate, func() (*pem.Block, error) { return privateKeyBlock(saKey) }},
	}
	for _, f := range files {
		block, err := f.block()
		if err != nil {
			return credentials{}, fmt.Errorf("%s: %w", f.path, err)
		}
		if err := os.WriteFile(f.path, pem.EncodeToMemory(block), 0o600); err != nil {
			return credentials{}, err
		}
	}
	return c, nil
}

// newCA returns a self-signed CA's key, certificate and its DER form.
func newCA() (*ecdsa.PrivateKey, *x509.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA key: %w", err)
	}
	tmpl := certTemplate("apitest CA")
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	return key, cert, der, nil
}

// certTemplate is valid from an hour ago, against clock skew between the
// test and nothing else, for a day: longer than any test runs.
func certTemplate(commonName string) *x509.Certificate {
	// A nil SerialNumber has x509.CreateCertificate choose a random one.
	now := time.Now()
	return &x509.Certificate{
		Subject:   pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(24 * time.Hour),
	}
}

func privateKeyBlock(key *ecdsa.PrivateKey) (*pem.Block, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &pem.Block{Type: "PRIVATE KEY", Bytes: der}, nil
}

func publicKeyBlock(key *ecdsa.PrivateKey) (*pem.Block, error) {
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	return &pem.Block{Type: "PUBLIC KEY", Bytes: der}, nil
}
