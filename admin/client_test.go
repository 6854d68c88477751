package admin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDo(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(401)
			w.Write([]byte(`{"error":"unauthorized","message":"bad token","hint":"send an admin token"}`))
			return
		}
		if r.URL.Path != "/api/openxet/v1/admin/tenants" {
			w.WriteHeader(502)
			w.Write([]byte("upstream broke"))
			return
		}
		w.Write([]byte(`{"tenants":[{"tenant":"alice"}]}`))
	}))
	defer hs.Close()
	var out struct{ Tenants []struct{ Tenant string } }
	if err := (&Client{Base: hs.URL + "/", Token: "tok"}).Do(context.Background(), "GET", "/tenants", nil, &out); err != nil || out.Tenants[0].Tenant != "alice" {
		t.Fatalf("ok answer: %v %+v", err, out)
	}
	err := (&Client{Base: hs.URL, Token: "nope"}).Do(context.Background(), "GET", "/tenants", nil, nil)
	var e *Error
	if !errors.As(err, &e) || e.Status != 401 || e.Code != "unauthorized" || !strings.Contains(err.Error(), "hint: send an admin token") {
		t.Fatalf("refusal: %v", err)
	}
	err = (&Client{Base: hs.URL, Token: "tok"}).Do(context.Background(), "GET", "/other", nil, nil)
	if !errors.As(err, &e) || e.Status != 502 || e.Message != "upstream broke" {
		t.Fatalf("non-JSON refusal: %v", err)
	}
}
