package proxy

import "testing"

func TestSmoke(t *testing.T) {
	h := newHarness(t, nil)
	db := h.db("rw", "", nil)
	if id := serverID(t, db); id != 1 {
		t.Fatalf("rw server_id %d", id)
	}
	ro := h.db("ro", "", nil)
	t.Log("ro:", serverID(t, ro))
}
