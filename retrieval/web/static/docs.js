// The /docs page: Swagger UI drawing /openapi.json; its "Try it out" writes carry the page's CSRF token (app.js).
"use strict";
(function () {
  function csrfToken() {
    var m = document.cookie.match(/(?:^|;\s*)retrieval_csrf=([^;]*)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true,
                   presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout",
                   requestInterceptor: function (req) { req.headers["X-CSRF-Token"] = csrfToken(); return req; }});
})();
