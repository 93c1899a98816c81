package topo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"time"
)

// IntegrityHandledRequests: the controller leader's record of the operator
// requests it has handled (HandledRequests).
const IntegrityHandledRequests = "switchyard handled requests v1"

// HandledRequests is the key of the leader's record of handled operator
// requests.
func (k Keys) HandledRequests() string { return path.Join(k.Prefix, "requests", "handled") }

// HandledRequests records the operator requests the controller leader
// acted on (or refused) within the request age bound, so that a signed
// request written back as pending is not carried out again, also by a new
// leader. Counter grows by one on every write; a reader refuses a record
// whose counter is lower than one it has seen (an old record written back).
type HandledRequests struct {
	Counter int64 `json:"counter"`
	// IDs maps each request id to the request's creation time; ids older
	// than the age bound are dropped (their requests are refused by age).
	IDs       map[string]time.Time `json:"ids"`
	UpdatedAt time.Time            `json:"updated_at"`
	Leader    string               `json:"leader"`
}

// EncodeHandledRequests marshals the record, signed with the process's
// integrity keyring when one is set.
func EncodeHandledRequests(h *HandledRequests) ([]byte, error) {
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("topo: encode handled requests: %w", err)
	}
	return SignDocument(IntegrityHandledRequests, b)
}

// DecodeHandledRequests parses and verifies the record; a MAC that does not
// verify is an error wrapping ErrIntegrity.
func DecodeHandledRequests(raw []byte) (HandledRequests, error) {
	var h HandledRequests
	trimmed := bytes.TrimSpace(raw)
	if err := json.Unmarshal(trimmed, &h); err != nil {
		return HandledRequests{}, fmt.Errorf("handled requests record does not decode: %w", err)
	}
	if err := VerifyDocument(IntegrityHandledRequests, trimmed); err != nil {
		return HandledRequests{}, fmt.Errorf("handled requests record: %w", err)
	}
	return h, nil
}
