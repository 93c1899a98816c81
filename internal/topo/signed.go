package topo

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Integrity domains of the other documents consumers read: the drained
// nodes (routing), the events and the proxy registrations (what the
// operator is shown).
const (
	IntegrityDrainedNodes      = "switchyard drained nodes v1"
	IntegrityEvent             = "switchyard event v1"
	IntegrityProxyRegistration = "switchyard proxy registration v1"
)

// EncodeSigned marshals v and signs it for domain with the process's
// integrity keyring (unchanged when none is set).
func EncodeSigned(domain string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("topo: encode: %w", err)
	}
	return SignDocument(domain, b)
}

// DecodeSigned parses raw into v and verifies its MAC for domain. A
// document that does not decode is an error that does not wrap
// ErrIntegrity; one that decodes but does not verify leaves v filled and
// returns an error wrapping ErrIntegrity (the caller must not act on it).
func DecodeSigned(domain string, raw []byte, v any) error {
	trimmed := bytes.TrimSpace(raw)
	if err := json.Unmarshal(trimmed, v); err != nil {
		return err
	}
	return VerifyDocument(domain, trimmed)
}

// EncodeDrained marshals a drained nodes document, signed when a keyring
// is set.
func EncodeDrained(d *DrainedNodes) ([]byte, error) { return EncodeSigned(IntegrityDrainedNodes, d) }

// DecodeDrained parses and verifies a drained nodes document (see
// DecodeSigned).
func DecodeDrained(raw []byte) (DrainedNodes, error) {
	var d DrainedNodes
	if err := DecodeSigned(IntegrityDrainedNodes, raw, &d); err != nil {
		if errorsIsIntegrity(err) {
			return d, fmt.Errorf("drained nodes document: %w", err)
		}
		return DrainedNodes{}, fmt.Errorf("drained nodes document does not decode: %w", err)
	}
	return d, nil
}

// EncodeEvent marshals an event, signed when a keyring is set.
func EncodeEvent(e *Event) ([]byte, error) {
	e.Unverified = ""
	return EncodeSigned(IntegrityEvent, e)
}

// DecodeEvent parses an event and verifies its MAC. An event that decodes
// but does not verify is returned with Unverified set to the reason and no
// error: readers show it marked, never as fact.
func DecodeEvent(raw []byte) (Event, error) {
	var e Event
	err := DecodeSigned(IntegrityEvent, raw, &e)
	e.Unverified = ""
	if err != nil {
		if !errorsIsIntegrity(err) {
			return Event{}, err
		}
		e.Unverified = err.Error()
	}
	return e, nil
}

// DecodeProxyRegistration parses a proxy registration and verifies its
// MAC like DecodeEvent: one that does not verify comes back with
// Unverified set.
func DecodeProxyRegistration(raw []byte) (ProxyRegistration, error) {
	var r ProxyRegistration
	err := DecodeSigned(IntegrityProxyRegistration, raw, &r)
	r.Unverified = ""
	if err != nil {
		if !errorsIsIntegrity(err) {
			return ProxyRegistration{}, err
		}
		r.Unverified = err.Error()
	}
	return r, nil
}
