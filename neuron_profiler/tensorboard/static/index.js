// TensorBoard's entry point for this plugin (it imports this module and calls render()).
// The page itself is index.html, so that every script is a file (no inline script: CSP).
export function render() {
  window.location.replace("index.html");
}
