//! `serve`'s page that acts (issue 36, 5): log in with the token, then
//! submit, cancel and retry orders through the very functions of the
//! `submit`, `cancel` and `retry` commands. Only when a token is set
//! (`SERVE_TOKEN` or `SERVE_TOKEN_FILE`): without one none of these routes
//! exists and the page shows no form.
//!
//! Every POST here is checked, in this order, before it does anything
//! (`guard`): its `Origin`/`Referer`/`Sec-Fetch-Site` ([`auth::same_origin`]),
//! its session cookie, its form's CSRF token; a request that fails one is
//! refused with 403 and logged. A GET of an action is 403 as well. Bodies
//! are at most [`MAX_BODY`] bytes (413 past that). Cancel and retry need
//! `confirm=yes`: the page's script asks with `confirm()` and sets it;
//! without the script (or without the field) the server answers with a
//! confirmation step instead of acting. Each action's result is a message
//! on the next page (redirect after POST, [`auth::Flash`]), and a line in
//! the log: the session, the action, the order, the result.

use super::auth::{self, Auth, Flash, Session, FLASH_COOKIE, SESSION_COOKIE};
use super::html::{esc, layout};
use super::App;
use crate::cli::cancel::CancelOutcome;
use crate::record::OrderId;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// The largest body a POST may have (an order's text is most of it).
pub(super) const MAX_BODY: usize = 64 * 1024;
/// The longest cancel reason taken from the form (the record keeps at most
/// 2 KiB of it).
const MAX_REASON: usize = 2048;

/// The routes that act, for a server with a token.
pub(super) fn routes() -> Router<App> {
    Router::new()
        .route("/login", post(login).get(to_main))
        .route("/logout", post(logout).get(refuse_get))
        .route("/action/submit", post(submit).get(refuse_get))
        .route("/action/cancel", post(cancel).get(refuse_get))
        .route("/action/retry", post(retry).get(refuse_get))
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

/// Who looks at a page, for what it shows.
pub(super) enum Viewer {
    /// No token set: the page only shows.
    ReadOnly,
    /// A token is set, this browser is not logged in: the login form.
    LoggedOut,
    /// Logged in: the forms, each with this CSRF token.
    In { csrf: String },
}

/// The viewer of a page requested with `h`, and the message a previous
/// action left for it (its cookie is then cleared by [`with_flash`]).
pub(super) fn viewer(app: &App, h: &HeaderMap) -> (Viewer, Option<Flash>) {
    let Some(a) = &app.auth else {
        return (Viewer::ReadOnly, None);
    };
    let flash = auth::cookie(h, FLASH_COOKIE).and_then(|c| a.flash(c));
    let v = match auth::cookie(h, SESSION_COOKIE).and_then(|c| a.session(c, now())) {
        Some(s) => Viewer::In { csrf: a.csrf(&s) },
        None => Viewer::LoggedOut,
    };
    (v, flash)
}

/// A page's response: not cached when it has a form (its CSRF token), and
/// the flash cookie cleared once shown.
pub(super) fn page_response(v: &Viewer, shown_flash: bool, body: String) -> Response {
    let mut r = Html(body).into_response();
    let h = r.headers_mut();
    if !matches!(v, Viewer::ReadOnly) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    if shown_flash {
        h.append(header::SET_COOKIE, clear_cookie(FLASH_COOKIE));
    }
    r
}

/// The message of an action, as HTML.
pub(super) fn flash_html(f: Option<&Flash>) -> String {
    match f {
        Some(f) => format!(
            "<p class=\"flash {}\" id=\"flash\">{}</p>",
            if f.ok { "ok" } else { "err" },
            esc(&f.text)
        ),
        None => String::new(),
    }
}

/// The forms of the main page: for its header (log in, or log out) and
/// for above the live part (submit an order; to one of `topics`, the
/// orders topics in priority order, when there are several).
pub(super) fn main_controls(v: &Viewer, topics: &[String]) -> (String, String) {
    match v {
        Viewer::ReadOnly => (String::new(), String::new()),
        Viewer::LoggedOut => (login_form(), String::new()),
        Viewer::In { csrf } => (
            format!(
                "<form class=\"inline\" method=\"post\" action=\"/logout\">{}<button id=\"logout\">log out</button></form>",
                hidden("csrf", csrf)
            ),
            format!(
                "{}<script src=\"/actions.js\"></script>",
                submit_form(csrf, "", topics, None)
            ),
        ),
    }
}

/// The forms of an order's page: cancel it (not completed) or retry it
/// (completed).
pub(super) fn order_controls(v: &Viewer, order: OrderId, completed: bool) -> String {
    let csrf = match v {
        Viewer::ReadOnly => return String::new(),
        Viewer::LoggedOut => {
            return "<p class=\"none\" id=\"login-hint\"><a href=\"/\">log in</a> on the main page to cancel or retry this order</p>".into()
        }
        Viewer::In { csrf } => csrf,
    };
    let (action, label, ask) = if completed {
        (
            "retry",
            "retry",
            format!("Send order {order} again, as a new order?"),
        )
    } else {
        (
            "cancel",
            "cancel",
            format!("Cancel order {order}? If it runs, its job is killed."),
        )
    };
    let reason = if completed {
        String::new()
    } else {
        format!("<input name=\"reason\" id=\"reason\" maxlength=\"{MAX_REASON}\" placeholder=\"reason (optional)\">")
    };
    format!(
        "<section class=\"panel actions\"><form method=\"post\" action=\"/action/{action}\" data-confirm=\"{}\">{}{}{}{reason}\
         <button id=\"{action}\">{label} order {order}</button></form></section><script src=\"/actions.js\"></script>",
        esc(&ask),
        hidden("csrf", csrf),
        hidden("order", &order.to_string()),
        hidden("confirm", ""),
    )
}

fn hidden(name: &str, value: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"{name}\" value=\"{}\">",
        esc(value)
    )
}

fn login_form() -> String {
    "<form class=\"inline\" method=\"post\" action=\"/login\" id=\"login-form\">\
     <input type=\"password\" name=\"token\" id=\"token\" autocomplete=\"current-password\" placeholder=\"token\" required>\
     <button id=\"login\">log in</button></form>"
        .into()
}

/// The submit form, `text` in it. With several orders topics (`topics`,
/// in priority order, R57) it has a choice of topic: `chosen`, else the
/// main one (the last), as `pool_worker submit` without `--topic`.
fn submit_form(csrf: &str, text: &str, topics: &[String], chosen: Option<&str>) -> String {
    let choice = if topics.len() > 1 {
        let chosen = chosen.or(topics.last().map(String::as_str));
        let options: String = topics
            .iter()
            .map(|t| {
                format!(
                    "<option value=\"{0}\"{1}>{0}</option>",
                    esc(t),
                    if Some(t.as_str()) == chosen {
                        " selected"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        format!("<label>topic <select name=\"topic\" id=\"topic\">{options}</select></label> ")
    } else {
        String::new()
    };
    format!(
        "<section class=\"panel actions\"><h2>Submit an order <small>a command line, or a JSON order (as <code>pool_worker submit --text</code> or <code>--json-file</code>)</small></h2>\
         <form method=\"post\" action=\"/action/submit\">{}\
         <textarea name=\"order\" id=\"order-input\" rows=\"3\" required placeholder=\"echo hi    or    {{&quot;cmd&quot;: [&quot;echo&quot;, &quot;hi&quot;], &quot;timeout_secs&quot;: 60}}\">{}</textarea>\
         {choice}<button id=\"submit\">submit</button></form></section>",
        hidden("csrf", csrf),
        html_escape::encode_text(text)
    )
}

fn now() -> u64 {
    crate::clock::wall_ms()
}

fn set_cookie(name: &str, value: &str, max_age_secs: u64, secure: bool) -> HeaderValue {
    let v = format!(
        "{name}={value}; Path=/; Max-Age={max_age_secs}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    );
    // The values are hex digits and dots.
    HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn clear_cookie(name: &str) -> HeaderValue {
    set_cookie(name, "", 0, false)
}

/// 303 to `to`, with `flash` for the page there.
fn redirect(a: &Auth, to: &str, flash: Flash, secure: bool) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    let h = r.headers_mut();
    if let Ok(loc) = HeaderValue::from_str(to) {
        h.insert(header::LOCATION, loc);
    }
    h.append(
        header::SET_COOKIE,
        set_cookie(FLASH_COOKIE, &a.flash_cookie(&flash), 60, secure),
    );
    r
}

/// A page that says why, with `status`.
fn message_page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = layout(
        title,
        &format!(
            "<header><h1><a href=\"/\">pool_worker</a> › {}</h1></header><main>{body}</main>",
            esc(title)
        ),
    );
    let mut r = (status, Html(html)).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The answer to a request refused as forged (or from a session that
/// ended): 403, nothing done, a warning in the log.
fn refused(peer: SocketAddr, path: &str, why: &str) -> Response {
    tracing::warn!(%peer, path, why, "serve: request refused");
    message_page(
        StatusCode::FORBIDDEN,
        "refused",
        "<p class=\"err\" id=\"refused\">refused: this request did not come from this server's page with a live session; nothing was done</p>\
         <p><a href=\"/\">back to the pool</a> (log in again if need be)</p>",
    )
}

async fn refuse_get(ConnectInfo(peer): ConnectInfo<SocketAddr>, uri: axum::http::Uri) -> Response {
    refused(peer, uri.path(), "GET of an action (actions are POST only)")
}

async fn to_main() -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response()
}

/// A form's fields (the first of each name); an empty set when the body is
/// not a form (the CSRF check then refuses it).
fn fields(h: &HeaderMap, body: &Bytes) -> HashMap<String, String> {
    let is_form = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.trim_start()
                .starts_with("application/x-www-form-urlencoded")
        });
    let mut out = HashMap::new();
    if is_form {
        for (k, v) in url::form_urlencoded::parse(body) {
            out.entry(k.into_owned()).or_insert_with(|| v.into_owned());
        }
    }
    out
}

/// A form's fields by name.
type Fields = HashMap<String, String>;

/// A POST's checks before anything is done: where it comes from, its
/// session, its CSRF token. The token, the session and the form's fields;
/// or the 403 (404 without a token: no such route then, but kept safe).
fn guard(
    app: &App,
    peer: SocketAddr,
    path: &str,
    h: &HeaderMap,
    body: &Bytes,
) -> Result<(Arc<Auth>, Session, Fields), Box<Response>> {
    let Some(a) = app.auth.clone() else {
        return Err(Box::new(StatusCode::NOT_FOUND.into_response()));
    };
    auth::same_origin(h).map_err(|why| Box::new(refused(peer, path, &why)))?;
    let Some(s) = auth::cookie(h, SESSION_COOKIE).and_then(|c| a.session(c, now())) else {
        return Err(Box::new(refused(peer, path, "no live session cookie")));
    };
    let f = fields(h, body);
    let given = f.get("csrf").map(String::as_str).unwrap_or_default();
    if !a.csrf_ok(&s, given) {
        let why = format!(
            "{} CSRF token (session {})",
            if given.is_empty() { "no" } else { "a wrong" },
            s.id()
        );
        return Err(Box::new(refused(peer, path, &why)));
    }
    Ok((a, s, f))
}

/// Logs an action's result; the flash that says it.
fn done(s: &Session, peer: SocketAddr, action: &str, order: &str, ok: bool, text: String) -> Flash {
    if ok {
        tracing::info!(session = %s.id(), %peer, action, order, result = %text, "serve: action");
    } else {
        tracing::warn!(session = %s.id(), %peer, action, order, result = %text, "serve: action");
    }
    Flash { ok, text }
}

async fn login(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(a) = app.auth.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    if let Err(why) = auth::same_origin(&h) {
        return refused(peer, "/login", &why);
    }
    let f = fields(&h, &body);
    let given = f.get("token").map(String::as_str).unwrap_or_default();
    if !a.token_matches(given) {
        tracing::warn!(%peer, "serve: login refused (wrong token)");
        return message_page(
            StatusCode::FORBIDDEN,
            "log in",
            &format!(
                "<p class=\"err\" id=\"refused\">wrong token</p>{}",
                login_form()
            ),
        );
    }
    let s = match a.new_session(now()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("serve: {e:#}");
            return message_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "log in",
                &format!("<p class=\"err\">{}</p>", esc(&format!("{e:#}"))),
            );
        }
    };
    tracing::info!(session = %s.id(), %peer, "serve: logged in");
    let secure = auth::over_https(&h);
    let mut r = redirect(
        &a,
        "/",
        Flash {
            ok: true,
            text: format!("logged in (session {})", s.id()),
        },
        secure,
    );
    r.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(
            SESSION_COOKIE,
            &a.session_cookie(&s),
            auth::SESSION_MS / 1000,
            secure,
        ),
    );
    r
}

async fn logout(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let (a, s, _) = match guard(&app, peer, "/logout", &h, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    tracing::info!(session = %s.id(), %peer, "serve: logged out");
    let mut r = redirect(
        &a,
        "/",
        Flash {
            ok: true,
            text: "logged out".into(),
        },
        auth::over_https(&h),
    );
    r.headers_mut()
        .append(header::SET_COOKIE, clear_cookie(SESSION_COOKIE));
    r
}

/// The submit form again, with what was typed (`text`, and the topic
/// chosen) and why it was not sent.
fn submit_again(
    status: StatusCode,
    (csrf, topics, chosen): (&str, &[String], Option<&str>),
    text: &str,
    why: &str,
) -> Response {
    message_page(
        status,
        "submit",
        &format!(
            "<p class=\"flash err\" id=\"flash\">{}; nothing sent</p>{}<p><a href=\"/\">back to the pool</a></p>",
            esc(why),
            submit_form(csrf, text, topics, chosen)
        ),
    )
}

async fn submit(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let (a, s, f) = match guard(&app, peer, "/action/submit", &h, &body) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let csrf = a.csrf(&s);
    let text = f.get("order").map(String::as_str).unwrap_or_default();
    let orders = app.src.orders().ok();
    let names = orders
        .as_ref()
        .map(|o| o.names().to_vec())
        .unwrap_or_default();
    let chosen = f.get("topic").map(|t| t.trim());
    let form = (csrf.as_str(), names.as_slice(), chosen);
    if text.trim().is_empty() {
        return submit_again(
            StatusCode::BAD_REQUEST,
            form,
            text,
            "nothing to submit: give a command line or a JSON order",
        );
    }
    // The topic chosen (R57), else the main one.
    let topic = match (chosen, &orders) {
        (None, _) => crate::record::Topic::MAIN,
        (Some(name), Some(o)) if o.topic_of(name).is_some() => {
            o.topic_of(name).unwrap_or(crate::record::Topic::MAIN)
        }
        (Some(name), _) => {
            let why = format!("'{name}' is not one of the orders topics");
            return submit_again(StatusCode::BAD_REQUEST, form, text, &why);
        }
    };
    match crate::cli::submit::check_and_send(&app.src, topic, text.as_bytes()).await {
        Ok(Ok((order, _))) => {
            let flash = done(
                &s,
                peer,
                "submit",
                &order.to_string(),
                true,
                format!("order {order} submitted"),
            );
            redirect(&a, &format!("/order/{order}"), flash, auth::over_https(&h))
        }
        Ok(Err(why)) => {
            done(&s, peer, "submit", "", false, why.clone());
            submit_again(StatusCode::BAD_REQUEST, form, text, &why)
        }
        Err(e) => {
            let why = format!("cannot send the order: {e:#}");
            done(&s, peer, "submit", "", false, why.clone());
            submit_again(StatusCode::SERVICE_UNAVAILABLE, form, text, &why)
        }
    }
}

/// The order a cancel or retry names (of one of the orders topics); or
/// the 400 that says why not.
fn order_field(app: &App, f: &Fields) -> Result<OrderId, Box<Response>> {
    let given = f.get("order").map(String::as_str).unwrap_or_default();
    let parsed = app
        .src
        .orders()
        .map_err(|e| e.0)
        .and_then(|o| o.parse_order(given.trim()));
    parsed.map_err(|e: String| {
        Box::new(message_page(
            StatusCode::BAD_REQUEST,
            "bad order",
            &format!("<p class=\"err\" id=\"flash\">{}; nothing done</p><p><a href=\"/\">back to the pool</a></p>", esc(&e)),
        ))
    })
}

/// The confirmation step of a destructive action asked without
/// `confirm=yes`: the same form, confirmed, and a way back.
fn confirm_step(
    action: &str,
    order: OrderId,
    csrf: &str,
    f: &HashMap<String, String>,
    question: &str,
) -> Response {
    let reason = f
        .get("reason")
        .map(|r| hidden("reason", r))
        .unwrap_or_default();
    message_page(
        StatusCode::OK,
        &format!("{action} order {order}?"),
        &format!(
            "<p id=\"confirm-question\">{}</p><form method=\"post\" action=\"/action/{action}\">{}{}{}{reason}\
             <button id=\"confirm-yes\">yes, {action} order {order}</button></form> <p><a href=\"/order/{order}\">no, back to the order</a></p>",
            esc(question),
            hidden("csrf", csrf),
            hidden("order", &order.to_string()),
            hidden("confirm", "yes"),
        ),
    )
}

/// A cancel's or retry's checks before it acts: the [`guard`], the order
/// its form names, and `confirm=yes`. The token, the session, the fields
/// and the order; or the response instead (the 403, the 400, or the
/// confirmation step that asks `question` of the order).
fn confirmed(
    app: &App,
    peer: SocketAddr,
    action: &str,
    h: &HeaderMap,
    body: &Bytes,
    question: impl FnOnce(OrderId) -> String,
) -> Result<(Arc<Auth>, Session, Fields, OrderId), Box<Response>> {
    let (a, s, f) = guard(app, peer, &format!("/action/{action}"), h, body)?;
    let order = order_field(app, &f)?;
    if f.get("confirm").map(String::as_str) != Some("yes") {
        let step = confirm_step(action, order, &a.csrf(&s), &f, &question(order));
        return Err(Box::new(step));
    }
    Ok((a, s, f, order))
}

async fn cancel(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let (a, s, f, order) = match confirmed(&app, peer, "cancel", &h, &body, |order| {
        format!(
            "Cancel order {order}? If it runs, its job is killed; either way it ends `cancelled`."
        )
    }) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let reason = match f.get("reason").map(|r| r.trim()).filter(|r| !r.is_empty()) {
        Some(r) => r.chars().take(MAX_REASON).collect(),
        None => format!(
            "cancelled by an operator on serve's page (session {})",
            s.id()
        ),
    };
    let (ok, text) = match crate::cli::cancel::cancel(&app.src, order, &reason).await {
        Ok((CancelOutcome::Recorded(pos), _)) => (true, format!("order {order}: cancel recorded (claims #{pos}); it ends `cancelled` when an instance reaches it")),
        Ok((CancelOutcome::AlreadyCancelled(pos), _)) => (true, format!("order {order} was already cancelled (claims #{pos}); nothing written")),
        Ok((CancelOutcome::AlreadyCompleted(status, pos), _)) => (false, format!("order {order} is already completed ({status}, claims #{pos}): left as it is")),
        Ok((CancelOutcome::NoSuchOrder(why), _)) => (false, format!("{why}; nothing written")),
        Err(e) => (false, format!("cannot cancel order {order}: {e:#}")),
    };
    let flash = done(&s, peer, "cancel", &order.to_string(), ok, text);
    redirect(&a, &format!("/order/{order}"), flash, auth::over_https(&h))
}

async fn retry(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let (a, s, _, order) = match confirmed(&app, peer, "retry", &h, &body, |order| {
        format!("Send order {order} again, as a new order that names it?")
    }) {
        Ok(x) => x,
        Err(r) => return *r,
    };
    let sent = match crate::cli::retry::prepare(&app.src, order).await {
        // To the original's own topic (R57), as `pool_worker retry`.
        Ok(Ok(payload)) => {
            crate::cli::submit::check_and_send(&app.src, order.topic, &payload).await
        }
        Ok(Err(why)) => Ok(Err(why)),
        Err(e) => Err(e),
    };
    let (ok, text, to) = match sent {
        Ok(Ok((new, _))) => (
            true,
            format!("order {order} sent again as order {new}"),
            new,
        ),
        Ok(Err(why)) => (false, format!("order {order} {why}"), order),
        Err(e) => (false, format!("cannot retry order {order}: {e:#}"), order),
    };
    let flash = done(&s, peer, "retry", &order.to_string(), ok, text);
    redirect(&a, &format!("/order/{to}"), flash, auth::over_https(&h))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R57: with several orders topics the submit form offers them, in
    /// priority order, the main one (the last) chosen unless another was;
    /// with one topic it offers no choice.
    #[test]
    fn the_submit_form_offers_a_topic_when_there_are_several() {
        let one = submit_form("c", "", &["work".to_string()], None);
        assert!(!one.contains("<select"), "{one}");
        let topics = ["urgent".to_string(), "work".to_string()];
        let form = submit_form("c", "", &topics, None);
        assert!(
            form.contains(
                "<select name=\"topic\" id=\"topic\"><option value=\"urgent\">urgent</option><option value=\"work\" selected>work</option></select>"
            ),
            "{form}"
        );
        let mut b = super::super::board::Board::new();
        b.waiting_by_topic = vec![("urgent".into(), 2, 1), ("work".into(), 9, 4)];
        let live = super::super::html::render_live(&b, 10_000);
        assert!(
            live.contains("id=\"waiting-0\">1</div><div class=\"k\">waiting in urgent</div>")
                && live.contains("id=\"waiting-1\">4</div><div class=\"k\">waiting in work</div>"),
            "{live}"
        );
        let again = submit_form("c", "echo hi", &topics, Some("urgent"));
        assert!(
            again.contains("<option value=\"urgent\" selected>"),
            "{again}"
        );
    }
}
