package authn

import (
	"net/http"

	"github.com/kplane/kplane/services/apiserver/internal/auth/user"
)

// Middleware authenticates HTTP requests and puts the user in their
// context; a refused request goes to refuse (which writes a 401 Status)
// and never reaches next.
func (c *Chain) Middleware(next http.Handler, refuse func(w http.ResponseWriter, message string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cr := Credentials{Authorization: r.Header.Values("Authorization")}
		if r.TLS != nil {
			cr.PeerCerts = r.TLS.PeerCertificates
		}
		u, err := c.Authenticate(r.Context(), cr)
		if err != nil {
			c.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "peer", r.RemoteAddr, "reason", err.Error())
			refuse(w, err.Error())
			return
		}
		next.ServeHTTP(w, r.WithContext(user.With(r.Context(), u)))
	})
}
