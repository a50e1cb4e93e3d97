// Sign-in for the admin page: the token is exchanged for an HttpOnly cookie
// (POST /admin/session), then `/` is loaded again and answers with the page.
'use strict';

(() => {
  const form = document.getElementById('signin-form');
  const input = document.getElementById('token');
  const error = document.getElementById('signin-error');
  const submit = document.getElementById('signin-submit');

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    error.textContent = '';
    if (!form.reportValidity()) return;
    submit.disabled = true;
    try {
      const response = await fetch('/admin/session', {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify({ token: input.value.trim() }),
      });
      if (response.status === 204) {
        // Read to the end first: a reload would cut the request short.
        await response.arrayBuffer();
        location.reload();
        return;
      }
      let detail = `Sign-in failed: HTTP ${response.status}`;
      try {
        const body = await response.json();
        if (body && typeof body.detail === 'string') detail = body.detail;
      } catch {
        // not JSON: keep the status line
      }
      error.textContent = detail;
      input.select();
      input.focus();
    } catch (err) {
      error.textContent = `Cannot reach the daemon (${err.message})`;
    } finally {
      submit.disabled = false;
    }
  });
})();
