// The console's shell: sign-in with a bearer token, the header (pages, identity, sign-out)
// and hash routing (#/members, #/workloads, #/workloads/<template>, #/search, #/cache).

import {clearToken, errorText, request, setToken, token, ApiError} from './api.js';
import {h, replace} from './dom.js';
import * as members from './members.js';
import * as workloads from './workloads.js';
import * as search from './search.js';
import * as cache from './cache.js';

const PAGES = {members, workloads, search, cache};
const $ = (id) => document.getElementById(id);

let current = null; // {abort: AbortController}

function stopPage() {
  if (current) current.abort();
  current = null;
}

/** Who the token is, from a SelfSubjectReview (as `kubectl auth whoami`); null when not allowed. */
async function whoami() {
  const review = await request('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    method: 'POST', body: {apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview'},
  });
  return review.status?.userInfo || null;
}

function showSignin(message) {
  stopPage();
  $('top').hidden = true;
  replace($('view'));
  $('signin').hidden = false;
  const err = $('signin-error');
  err.hidden = !message;
  err.textContent = message || '';
  $('token').value = '';
  $('token').focus();
}

async function signedIn() {
  $('signin').hidden = true;
  $('top').hidden = false;
  $('whoami').textContent = '';
  // the page's own requests go out at once; the identity fills in when it is known
  whoami().then((u) => {
    if (!u) return;
    $('whoami').textContent = u.username;
    $('whoami').title = (u.groups || []).join(', ');
  }).catch(() => { /* a 401 signs the tab out; anything else leaves the name empty */ });
  route();
}

function route() {
  if (!token()) {
    showSignin('');
    return;
  }
  const hash = location.hash.replace(/^#\/?/, '');
  const [name, ...rest] = hash.split('/');
  const page = PAGES[name];
  if (!page) {
    location.replace('#/members');
    return;
  }
  stopPage();
  for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('active', a.dataset.page === name);
  const abort = new AbortController();
  current = abort;
  const root = h('div', {class: `page page-${name}`, data: {page: name}});
  replace($('view'), root);
  try {
    page.mount(root, abort.signal, rest.map(decodeURIComponent).join('/'));
  } catch (e) {
    replace(root, h('p', {class: 'error'}, errorText(e)));
  }
}

async function onSignin(ev) {
  ev.preventDefault();
  const t = $('token').value.trim();
  if (!t) return;
  setToken(t);
  $('token').value = '';
  // a token the server does not accept is a 401 on any request; /version is open to
  // anyone, so ask an authenticated path
  try {
    await request('/api');
  } catch (e) {
    if (e instanceof ApiError && e.code === 401) {
      clearToken();
      showSignin('The server did not accept this token (401 Unauthorized).');
      return;
    }
  }
  if (!location.hash || location.hash === '#' || location.hash === '#/') history.replaceState(null, '', '#/members');
  signedIn();
}

function signOut() {
  clearToken();
  // a fresh document: nothing read with this identity stays in memory
  location.replace(location.pathname);
}

window.addEventListener('fedctl:unauthorized', () => {
  if (token()) {
    clearToken();
    showSignin('The server no longer accepts this token (401 Unauthorized): sign in again.');
  }
});
window.addEventListener('hashchange', route);
$('signin-form').addEventListener('submit', onSignin);
$('signout').addEventListener('click', signOut);

if (token()) signedIn();
else showSignin('');
