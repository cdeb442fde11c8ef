"""The sign-in shell of `perfloop serve`: what a browser gets for a page asked for without the token
(a link followed, a reload, the printed `/#token=...` address). It holds no session data. Its
script keeps the token in `sessionStorage` (scoped to this origin, host and port; gone with the
tab), takes it from the address's fragment (never sent to a server) or from a pasted value, drops
it from the address bar, fetches the page with `Authorization: Bearer` and writes it in place (the
page's own scripts then send the header on every fetch and form post: agent/web/templates/
client.js.j2). A wrong token is forgotten and asked for again."""

from __future__ import annotations

from starlette.responses import HTMLResponse

SHELL = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>perfloop</title></head>
<body id="perfloop-shell" style="font: 14px system-ui, sans-serif; padding: 2em">
<p id="message">loading…</p>
<form id="sign-in" hidden><label>Token: <input id="token" type="password" autocomplete="off" size="40"></label>
<button id="sign-in-button" type="submit">Open</button></form>
<script nonce="NONCE">
(() => {
  const KEY = "perfloop-token", nonce = document.currentScript.nonce;
  const here = new URL(location.href);
  const given = new URLSearchParams(here.hash.slice(1)).get("token") || here.searchParams.get("token");
  if (given) {
    sessionStorage.setItem(KEY, given);
    here.searchParams.delete("token");
    history.replaceState(null, "", here.pathname + here.search);
  }
  const message = document.getElementById("message"), form = document.getElementById("sign-in");
  const ask = (why) => {
    message.textContent = why + ": open the address `perfloop serve` printed (.../#token=...) or paste the token";
    form.hidden = false;
  };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById("token").value.trim());
    load();
  });
  async function load() {
    const token = sessionStorage.getItem(KEY);
    if (!token) return ask("this perfloop server needs its token");
    const r = await fetch(location.pathname + location.search, {
      headers: {Authorization: "Bearer " + token, "X-Perfloop-Nonce": nonce}, credentials: "omit", cache: "no-store"});
    if (r.status === 401) {
      sessionStorage.removeItem(KEY);
      return ask("this perfloop server needs its token (the one given is wrong)");
    }
    if (!(r.headers.get("content-type") || "").startsWith("text/html")) {  // a session's file
      const a = document.createElement("a");
      a.href = URL.createObjectURL(await r.blob());
      a.download = location.pathname.split("/").pop();
      a.click();
      message.textContent = "downloaded " + a.download;
      return;
    }
    const html = await r.text();
    document.open();
    document.write(html);
    document.close();
  }
  load();
})();
</script></body></html>
"""


def sign_in(nonce: str) -> HTMLResponse:
    """The shell, with this response's CSP nonce (status 401: nothing of the session is here)."""
    return HTMLResponse(SHELL.replace("NONCE", nonce), status_code=401)
