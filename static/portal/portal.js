// The portal's small behaviours: copy buttons, and a confirmation before removing a member.
document.querySelectorAll("button.copy").forEach((button) => {
  button.addEventListener("click", async () => {
    const text = document.querySelector(button.dataset.copy).textContent.trim();
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch {
      // No clipboard (plain HTTP on another host): select the text for Ctrl-C instead.
      window.getSelection().selectAllChildren(document.querySelector(button.dataset.copy));
      button.textContent = "Selected: press Ctrl-C";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 2000);
  });
});
document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.dataset.confirm)) event.preventDefault();
  });
});
