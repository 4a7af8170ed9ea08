//! The operator console (`--admin-listen`): its JSON API against a real service, Redis and
//! module (every write guarded: the role, the CSRF token and origin of a cookie, JSON only;
//! what it writes enforced by the service), and the page in a real browser
//! (`tests/python/console_browser.py`: Debian's chromium driven by Selenium).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use redis_ratelimit_testkit::server::{Server, wait_until};
use serde_json::{Value, json};

use crate::harness::{Reply, Service, TempDir, http, redis_url};
use crate::venv::{python_of, tests_dir};

const CONFIG: &str = "\
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100, name: per-minute, tenant_key: tenant}
";

const EDITOR_TOKEN: &str = "editor-token-0123456789abcdef";
const VIEWER_TOKEN: &str = "viewer-token-0123456789abcdef";

/// A service with the console on, its users file in `dir`.
fn console_service(redis: &Server, dir: &TempDir) -> (Service, SocketAddr) {
    dir.write(
        "users",
        &format!("# the console's users\neditor alice {EDITOR_TOKEN}\nviewer bob {VIEWER_TOKEN}\n"),
    );
    let users = dir.0.join("users");
    let service = Service::start(
        &redis_url(redis),
        &[("api.yaml", CONFIG)],
        &[
            "--admin-listen",
            "127.0.0.1:0",
            "--admin-users-file",
            users.to_str().unwrap(),
        ],
    );
    let admin = service.admin();
    (service, admin)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

fn json_of(reply: &Reply) -> Value {
    serde_json::from_str(&reply.body).unwrap_or_else(|_| panic!("not JSON: {}", reply.body))
}

/// The store's version, read as the editor.
fn version(admin: SocketAddr) -> u64 {
    let auth = bearer(EDITOR_TOKEN);
    let reply = http(
        admin,
        "GET",
        "/admin/v1/list",
        "",
        &[("Authorization", &auth)],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    json_of(&reply)["version"].as_u64().unwrap()
}

/// The limit a check through the service applies to `tenant` (read, not charged).
fn limit_of(service: &Service, tenant: &str) -> u64 {
    let body = json!({"domain": "api", "descriptors": [
        {"entries": [{"key": "tenant", "value": tenant}], "hitsAddend": 0}
    ]});
    let (status, answer) = service.check_json(&body.to_string());
    assert_eq!(status, 200, "{answer}");
    answer["statuses"][0]["currentLimit"]["requestsPerUnit"]
        .as_u64()
        .unwrap()
}

#[test]
fn the_api_mirrors_rlctl_and_what_it_writes_is_enforced() {
    let redis = Server::start(&[]);
    let dir = TempDir::new("console-api");
    let (service, admin) = console_service(&redis, &dir);
    let auth = bearer(EDITOR_TOKEN);
    let editor = [("Authorization", auth.as_str())];
    let post = |path: &str, body: Value| http(admin, "POST", path, &body.to_string(), &editor);

    // A dry run writes nothing and names what it would change.
    let dry = post(
        "/admin/v1/plan/set",
        json!({"name": "gold", "limits": ["per-minute=sliding:3/60s"], "dry_run": true}),
    );
    assert_eq!(dry.status, 200, "{}", dry.body);
    assert_eq!(json_of(&dry)["written"], false);
    assert_eq!(version(admin), 0);
    assert_eq!(
        post(
            "/admin/v1/plan/set",
            json!({"name": "gold", "limits": ["per-minute=sliding:3/60s"]})
        )
        .status,
        200
    );
    // The preview of putting acme on it names acme, before and after.
    let preview = json_of(&post(
        "/admin/v1/tenant/set",
        json!({"tenant": "acme", "plan": "gold", "dry_run": true}),
    ));
    assert_eq!(preview["moved"]["tenants"][0]["tenant"], "acme");
    assert_eq!(
        preview["moved"]["tenants"][0]["after"][0],
        "per-minute=sliding:3/1m <- plan gold"
    );
    // Applied at the version previewed; enforced by the service within a second.
    let applied = post(
        "/admin/v1/tenant/set",
        json!({"tenant": "acme", "plan": "gold", "if_version": preview["from_version"]}),
    );
    assert_eq!(applied.status, 200, "{}", applied.body);
    let written = Instant::now();
    assert!(wait_until(Duration::from_secs(1), || limit_of(
        &service, "acme"
    ) == 3));
    eprintln!("tenant set to enforced: {:?}", written.elapsed());
    // The same preview applied again is stale: the store moved.
    let stale = post(
        "/admin/v1/tenant/delete",
        json!({"tenant": "acme", "if_version": preview["from_version"]}),
    );
    assert_eq!(stale.status, 409, "{}", stale.body);
    // rlctl's refusals, word for word: a misspelt limit name.
    let typo = post(
        "/admin/v1/override/set",
        json!({"pattern": "acme", "limits": ["per-minite=sliding:5/60s"]}),
    );
    assert_eq!(typo.status, 400);
    assert!(
        json_of(&typo)["detail"]
            .as_str()
            .unwrap()
            .contains("did you mean 'per-minute'?"),
        "{}",
        typo.body
    );
    // A temporary override.
    let set = post(
        "/admin/v1/override/set",
        json!({"pattern": "acme", "limits": ["per-minute=sliding:7/60s"], "ttl": "10m"}),
    );
    assert_eq!(set.status, 200, "{}", set.body);
    assert!(wait_until(Duration::from_secs(1), || limit_of(
        &service, "acme"
    ) == 7));
    let tenant = json_of(&http(
        admin,
        "GET",
        "/admin/v1/tenant?tenant=acme",
        "",
        &editor,
    ));
    assert_eq!(tenant["plan"], "gold");
    assert_eq!(tenant["effective"][0]["rule"]["kind"], "override");
    assert!(tenant["effective"][0]["rule"]["expires"]["ms"].is_u64());
    // Live usage: two checks, seen on the tenant's real key.
    let check = json!({"domain": "api", "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}]}]});
    service.check_json(&check.to_string());
    let (_, last) = service.check_json(&check.to_string());
    let usage = json_of(&http(
        admin,
        "GET",
        "/admin/v1/usage?tenant=acme",
        "",
        &editor,
    ));
    let row = &usage["limits"][0];
    assert_eq!(row["key"], "rls:api:tenant=acme|plan:per-minute:sliding");
    assert_eq!(row["quota"], 7);
    assert_eq!(
        row["remaining"], last["statuses"][0]["limitRemaining"],
        "{usage}"
    );
    // The audit trail names the editor.
    let history = json_of(&http(
        admin,
        "GET",
        "/admin/v1/history?tenant=acme&count=5",
        "",
        &editor,
    ));
    assert_eq!(history["entries"][0]["who"], "console:alice");
    assert_eq!(history["entries"][0]["op"], "override set acme");
    // Health.
    let health = json_of(&http(admin, "GET", "/admin/v1/health", "", &editor));
    assert_eq!(health["store"]["reachable"], true);
    assert_eq!(health["plans"]["store"]["version"], version(admin));
    assert!(health["decisions"]["store"].as_u64().unwrap() >= 2);
}

/// Signs in with `token` from the page's own origin: the session cookie and CSRF token.
fn sign_in(admin: SocketAddr, token: &str) -> (String, String) {
    let reply = http(
        admin,
        "POST",
        "/admin/login",
        &json!({"token": token}).to_string(),
        &[("Origin", "http://test")],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let cookie = reply.header("set-cookie").unwrap().to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/admin"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    let pair = cookie.split(';').next().unwrap().to_string();
    (pair, json_of(&reply)["csrf"].as_str().unwrap().to_string())
}

#[test]
fn every_write_is_guarded_and_every_answer_says_so() {
    let redis = Server::start(&[]);
    let dir = TempDir::new("console-guard");
    let (_service, admin) = console_service(&redis, &dir);
    let auth = bearer(EDITOR_TOKEN);
    let editor = [("Authorization", auth.as_str())];
    let body = json!({"name": "gold", "limits": ["per-minute=sliding:3/60s"]}).to_string();
    assert_eq!(
        http(admin, "POST", "/admin/v1/plan/set", &body, &editor).status,
        200
    );
    let before = version(admin);
    let write = json!({"tenant": "acme", "plan": "gold"}).to_string();
    let refused = |extra: &[(&str, &str)], status: u16, why: &str| {
        let reply = http(admin, "POST", "/admin/v1/tenant/set", &write, extra);
        assert_eq!(reply.status, status, "{why}: {}", reply.body);
        assert_eq!(version(admin), before, "{why}: the store changed");
        reply
    };
    // No credential, a wrong token.
    refused(&[], 401, "no credential");
    refused(
        &[("Authorization", "Bearer not-a-users-token-at-all")],
        401,
        "a wrong token",
    );
    // The viewer, by token.
    let viewer = bearer(VIEWER_TOKEN);
    let reply = refused(&[("Authorization", &viewer)], 403, "the viewer");
    assert!(reply.body.contains("bob is a viewer"), "{}", reply.body);
    // The editor's session cookie without its CSRF token, from another origin, or as a
    // form: what a page of another site can make a browser send.
    let (cookie, csrf) = sign_in(admin, EDITOR_TOKEN);
    refused(
        &[("Cookie", &cookie)],
        403,
        "a cookie without the CSRF token",
    );
    refused(
        &[
            ("Cookie", &cookie),
            ("X-CSRF-Token", &csrf),
            ("Origin", "http://evil.example"),
        ],
        403,
        "another origin",
    );
    refused(
        &[
            ("Cookie", &cookie),
            ("X-CSRF-Token", &csrf),
            ("Sec-Fetch-Site", "same-site"),
        ],
        403,
        "a same-site page of another origin",
    );
    let (viewer_cookie, viewer_csrf) = sign_in(admin, VIEWER_TOKEN);
    refused(
        &[("Cookie", &cookie), ("X-CSRF-Token", &viewer_csrf)],
        403,
        "another session's CSRF token",
    );
    refused(
        &[
            ("Cookie", &viewer_cookie),
            ("X-CSRF-Token", &viewer_csrf),
            ("Origin", "http://test"),
        ],
        403,
        "the viewer's own page",
    );
    let form = format!(
        "POST /admin/v1/tenant/set HTTP/1.1\r\nHost: test\r\nConnection: close\r\nCookie: \
         {cookie}\r\nX-CSRF-Token: {csrf}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{write}",
        write.len()
    );
    let reply = crate::harness::exchange(admin, &form);
    assert_eq!(reply.status, 415, "{}", reply.body);
    assert_eq!(version(admin), before);
    // Signing in from another origin is refused too.
    let login = http(
        admin,
        "POST",
        "/admin/login",
        &json!({"token": EDITOR_TOKEN}).to_string(),
        &[("Origin", "http://evil.example")],
    );
    assert_eq!(login.status, 403);
    // The editor's page: cookie, CSRF token, own origin.
    let reply = http(
        admin,
        "POST",
        "/admin/v1/tenant/set",
        &write,
        &[
            ("Cookie", &cookie),
            ("X-CSRF-Token", &csrf),
            ("Origin", "http://test"),
        ],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(version(admin), before + 1);
    // Signed out: the cookie is nothing.
    let out = http(
        admin,
        "POST",
        "/admin/logout",
        "{}",
        &[
            ("Cookie", &cookie),
            ("X-CSRF-Token", &csrf),
            ("Origin", "http://test"),
        ],
    );
    assert_eq!(out.status, 200, "{}", out.body);
    assert_eq!(
        http(
            admin,
            "GET",
            "/admin/v1/session",
            "",
            &[("Cookie", &cookie)]
        )
        .status,
        401
    );
    // Every answer, the page's and the API's, forbids inline and foreign script.
    for path in [
        "/admin/",
        "/admin/console.js",
        "/admin/v1/list",
        "/admin/nothing",
    ] {
        let reply = http(admin, "GET", path, "", &editor);
        let csp = reply.header("content-security-policy").unwrap_or_default();
        assert!(
            csp.contains("script-src 'self'") && csp.contains("default-src 'none'"),
            "{path}: {csp}"
        );
        assert_eq!(
            reply.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    }
    // The page has no inline script: every <script> has a src.
    let page = http(admin, "GET", "/admin/", "", &[]);
    assert_eq!(page.status, 200);
    for tag in page.body.split("<script").skip(1) {
        assert!(
            tag.trim_start().starts_with("src="),
            "inline script: <script{tag:.40}"
        );
    }
    let handler = page.body.match_indices(" on").find(|(at, _)| {
        let rest = &page.body[at + 3..];
        let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
        !name.is_empty() && rest[name.len()..].starts_with('=')
    });
    assert_eq!(handler, None, "no inline event handler in the page");
}

#[test]
fn hostile_names_come_back_as_json_strings_only() {
    let redis = Server::start(&[]);
    let dir = TempDir::new("console-hostile");
    let (_service, admin) = console_service(&redis, &dir);
    let auth = bearer(EDITOR_TOKEN);
    let editor = [("Authorization", auth.as_str())];
    let post = |path: &str, body: Value| http(admin, "POST", path, &body.to_string(), &editor);
    assert_eq!(
        post(
            "/admin/v1/plan/set",
            json!({"name": "gold", "limits": ["per-minute=sliding:3/60s"]})
        )
        .status,
        200
    );
    let hostile = "<script>alert(1)</script>";
    assert_eq!(
        post(
            "/admin/v1/tenant/set",
            json!({"tenant": hostile, "plan": "gold"})
        )
        .status,
        200
    );
    // What the store refuses as a tenant is refused with the reason, nothing written.
    let spaced = post(
        "/admin/v1/tenant/set",
        json!({"tenant": "<img src=x onerror=alert(1)>", "plan": "gold"}),
    );
    assert_eq!(spaced.status, 400);
    assert!(spaced.body.contains("bad tenant"), "{}", spaced.body);
    let unknown_field = post(
        "/admin/v1/tenant/set",
        json!({"tenant": "a", "plan": "gold", "who": "x"}),
    );
    assert_eq!(unknown_field.status, 400, "{}", unknown_field.body);
    let list = http(admin, "GET", "/admin/v1/list", "", &editor);
    assert_eq!(list.header("content-type"), Some("application/json"));
    assert_eq!(json_of(&list)["tenants"][0]["tenant"], hostile);
    let query = format!(
        "/admin/v1/tenant?tenant={}",
        "%3Cscript%3Ealert(1)%3C%2Fscript%3E"
    );
    let tenant = http(admin, "GET", &query, "", &editor);
    assert_eq!(tenant.status, 200, "{}", tenant.body);
    assert_eq!(json_of(&tenant)["tenant"], hostile);
}

/// Sends `request` over a mutual-TLS connection to the console (as the client certificate
/// `client`, if given): the reply's status and body.
fn over_tls(
    admin: SocketAddr,
    certs: &crate::hostile::Certificates,
    client: bool,
    request: &str,
) -> (u16, String) {
    use std::io::{Read, Write};
    let identity = client.then_some((certs.client_cert.as_path(), certs.client_key.as_path()));
    let mut stream = crate::hostile::tls_client_as(admin, &certs.ca, identity).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    let _ = stream.read_to_string(&mut raw);
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    (status, body.to_string())
}

#[test]
fn a_client_certificate_names_the_user_and_still_needs_the_csrf_token() {
    let redis = Server::start(&[]);
    let dir = TempDir::new("console-mtls");
    let certs = crate::hostile::certificates(&dir.0);
    // The test CA's client certificate says CN=envoy: a user without a token.
    dir.write(
        "users",
        &format!("editor envoy\nviewer bob {VIEWER_TOKEN}\n"),
    );
    let service = Service::start(
        &redis_url(&redis),
        &[("api.yaml", CONFIG)],
        &[
            "--admin-listen",
            "127.0.0.1:0",
            "--admin-users-file",
            dir.0.join("users").to_str().unwrap(),
            "--admin-tls-cert",
            certs.server_cert.to_str().unwrap(),
            "--admin-tls-key",
            certs.server_key.to_str().unwrap(),
            "--admin-tls-client-ca",
            certs.ca.to_str().unwrap(),
        ],
    );
    let admin = service.admin();
    let get = "GET /admin/v1/session HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let (status, body) = over_tls(admin, &certs, true, get);
    assert_eq!(status, 200, "{body}");
    let session: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (session["user"].as_str(), session["role"].as_str()),
        (Some("envoy"), Some("editor"))
    );
    let csrf = session["csrf"].as_str().unwrap().to_string();
    // Without a client certificate: no TLS session at all.
    assert!(
        crate::hostile::tls_client_as(admin, &certs.ca, None)
            .and_then(|mut stream| {
                use std::io::{Read, Write};
                stream.write_all(get.as_bytes())?;
                let mut raw = String::new();
                stream.read_to_string(&mut raw).map(|_| raw)
            })
            .is_err(),
        "no client certificate, no answer"
    );
    let body = json!({"name": "gold", "limits": ["per-minute=sliding:3/60s"]}).to_string();
    let write = |headers: &str| {
        format!(
            "POST /admin/v1/plan/set HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
             Content-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    };
    // The certificate is sent by the browser by itself: a write needs its CSRF token.
    let (status, reply) = over_tls(admin, &certs, true, &write(""));
    assert_eq!(status, 403, "{reply}");
    let (status, reply) = over_tls(
        admin,
        &certs,
        true,
        &write(&format!(
            "X-CSRF-Token: {csrf}\r\nOrigin: https://localhost\r\n"
        )),
    );
    assert_eq!(status, 200, "{reply}");
    let written: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(written["who"], "console:envoy");
}

#[test]
fn the_console_in_a_real_browser() {
    let python = python_of("requirements-console.txt", "console-venv");
    let redis = Server::start(&[]);
    let dir = TempDir::new("console-browser");
    let (service, admin) = console_service(&redis, &dir);
    // The screenshots go to the test's temp dir, so a test run leaves the tree as it was;
    // RL_CONSOLE_SCREENSHOTS=docs/console (from the repository root) refreshes the docs'.
    let shots = match std::env::var_os("RL_CONSOLE_SCREENSHOTS") {
        Some(to) => Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(to),
        None => dir.0.join("screenshots"),
    };
    let output = Command::new(python)
        .arg(tests_dir().join("console_browser.py"))
        .args(["--admin", &format!("http://{admin}")])
        .args(["--http", &format!("http://{}", service.http)])
        .args(["--redis-port", &redis.port.to_string()])
        .args([
            "--editor-token",
            EDITOR_TOKEN,
            "--viewer-token",
            VIEWER_TOKEN,
        ])
        .arg("--screenshots")
        .arg(&shots)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("console browser test passed"),
        "the browser test failed:\n{stdout}\n{}\nservice log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        service.log()
    );
    for line in stdout.lines().filter(|line| line.starts_with("RESULT ")) {
        eprintln!("{line}");
    }
}
