/* The explorers on the website, without a kernel.
 *
 * Each explorer cell of a notebook page carries, after its still picture, a hidden
 * <div class="mhsa-site-explorer"> holding the manifest its build wrote (book/conf.py,
 * mhsa_helpers/teaching/site_explorers.py): the explorer's controls, the values each offers, and one
 * picture and caption per setting, all drawn by the explorer's own code when the site was built.
 * This script puts those controls in place of the still picture; moving one shows the picture of the
 * new setting. Nothing is computed here and nothing is fetched from another site.
 *
 * A setting the build did not make (the explorer refuses it, or the explorer moves one control at a
 * time) is replaced by the setting with the moved control's value that keeps the most other
 * controls where they are, and the controls follow it.
 */
(function () {
  "use strict";

  function build(holder) {
    var manifest = JSON.parse(holder.querySelector("script").textContent);
    var cell = holder.parentElement;
    var still = cell.querySelector(".cell_output");
    var current = manifest.start.slice();
    var inputs = [];
    var loaded = {};

    var root = document.createElement("div");
    root.className = "mhsa-site-explorer-box";
    var title = document.createElement("div");
    title.className = "mhsa-site-explorer-title";
    title.textContent = manifest.title;
    root.appendChild(title);
    var controls = document.createElement("div");
    controls.className = "mhsa-site-controls";
    root.appendChild(controls);

    manifest.controls.forEach(function (control, k) {
      var box = document.createElement("div");
      box.className = "mhsa-site-control mhsa-site-control-" + control.name.replace(/_/g, "-");
      var label = document.createElement("label");
      var name = document.createElement("span");
      name.className = "mhsa-site-label";
      name.textContent = control.label;
      if (control.kind === "check") {
        var check = document.createElement("input");
        check.type = "checkbox";
        check.addEventListener("change", function () { move(k, check.checked ? 1 : 0); });
        label.appendChild(check);
        label.appendChild(name);
        box.appendChild(label);
        inputs.push({ set: function (i) { check.checked = i === 1; }, element: check });
      } else if (control.kind === "buttons") {
        name.id = "mhsa-" + manifest.pictures.replace(/[^A-Za-z0-9]/g, "") + "-" + k;
        box.appendChild(name);
        var group = document.createElement("span");
        group.setAttribute("role", "group");
        group.setAttribute("aria-labelledby", name.id);
        var buttons = control.labels.map(function (text, i) {
          var button = document.createElement("button");
          button.type = "button";
          button.textContent = text;
          button.addEventListener("click", function () { move(k, i); });
          group.appendChild(button);
          return button;
        });
        box.appendChild(group);
        inputs.push({
          set: function (i) {
            buttons.forEach(function (button, j) { button.setAttribute("aria-pressed", String(i === j)); });
          },
          element: buttons[0],
        });
      } else {
        var range = document.createElement("input");
        range.type = "range";
        range.min = "0";
        range.max = String(control.labels.length - 1);
        range.step = "1";
        var readout = document.createElement("output");
        readout.className = "mhsa-site-readout";
        range.addEventListener("input", function () { move(k, Number(range.value)); });
        label.appendChild(name);
        label.appendChild(range);
        box.appendChild(label);
        box.appendChild(readout);
        inputs.push({
          set: function (i) {
            range.value = String(i);
            readout.textContent = control.labels[i];
            range.setAttribute("aria-valuetext", control.labels[i]);
          },
          element: range,
        });
      }
      controls.appendChild(box);
    });

    var caption = document.createElement("div");
    caption.className = "mhsa-site-caption";
    root.appendChild(caption);
    var picture = load(current);
    root.appendChild(picture);
    var note = document.createElement("p");
    note.className = "mhsa-site-note";
    note.appendChild(document.createTextNode(
      "Precomputed pictures of this explorer, drawn by its own code when the site was built. " +
      manifest.offered + " For every setting, run the notebook: "));
    var colab = document.createElement("a");
    colab.href = manifest.colab;
    colab.textContent = "open it in Colab";
    note.appendChild(colab);
    note.appendChild(document.createTextNode(" or in JupyterLab."));
    root.appendChild(note);

    function key(indices) { return indices.join(","); }

    // The setting to show when control k moves to i: the exact one, or the nearest the build made.
    function resolve(k, i) {
      var wanted = current.slice();
      wanted[k] = i;
      if (manifest.states[key(wanted)]) return wanted;
      var best = null;
      var bestScore = -1;
      Object.keys(manifest.states).forEach(function (name) {
        var indices = name.split(",").map(Number);
        if (indices[k] !== i) return;
        var score = 0;
        indices.forEach(function (index, j) { if (index === wanted[j]) score += 1; });
        if (score > bestScore) { best = indices; bestScore = score; }
      });
      return best;
    }

    // One <img> per picture, decoded once: a move puts the next one in place of the shown one, so that the
    // browser has nothing left to fetch or decode when the key is pressed.
    function load(indices) {
      var name = manifest.states[key(indices)].picture;
      if (!loaded[name]) {
        var image = new Image();
        image.className = "mhsa-site-picture";
        image.alt = manifest.title;
        image.style.width = manifest.width + "px";
        image.src = manifest.pictures + name;
        loaded[name] = image;
        if (image.decode) image.decode().catch(function () {});
      }
      return loaded[name];
    }

    // Load the pictures one move away, so that the next move only swaps a decoded picture.
    function prefetch() {
      manifest.controls.forEach(function (control, k) {
        [current[k] - 1, current[k] + 1].forEach(function (i) {
          if (i < 0 || i >= control.labels.length) return;
          var next = resolve(k, i);
          if (next) load(next);
        });
      });
    }

    function show(indices) {
      current = indices.slice();
      inputs.forEach(function (input, k) { input.set(current[k]); });
      var state = manifest.states[key(current)];
      var next = load(current);
      if (next !== picture) {
        picture.replaceWith(next);
        picture = next;
      }
      caption.textContent = state.caption;
      root.setAttribute("data-state", key(current));
    }

    function move(k, i) {
      var next = resolve(k, i);
      if (next) {
        show(next);
        prefetch();
      } else {
        inputs[k].set(current[k]);
      }
    }

    holder.appendChild(root);
    show(current);
    if (still) still.hidden = true;
    holder.hidden = false;
    prefetch();
  }

  function start() {
    document.querySelectorAll(".mhsa-site-explorer").forEach(build);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
