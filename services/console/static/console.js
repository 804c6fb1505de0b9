// The Floe console's only script of its own: sparklines, a connection notice, Ctrl+Enter in the
// SQL box. Everything else is htmx attributes in the templates.
(function () {
  "use strict";

  var bars = window.uPlot.paths.bars({ size: [0.7, 4], align: 0 });

  // One chart per [data-spark] element: its JSON is {"x": [epoch seconds], "y": [counts]}.
  function drawSparks(root) {
    var found = root.querySelectorAll ? root.querySelectorAll("[data-spark]") : [];
    Array.prototype.forEach.call(found, function (el) {
      if (el.dataset.drawn === "1") {
        return;
      }
      el.dataset.drawn = "1";
      var data = JSON.parse(el.dataset.spark);
      var color = window.getComputedStyle(el).color;
      var options = {
        width: el.clientWidth || 120,
        height: el.clientHeight || 30,
        pxAlign: false,
        cursor: { show: false },
        legend: { show: false },
        select: { show: false },
        axes: [{ show: false }, { show: false }],
        scales: {
          x: { time: false, range: function (u, min, max) { return [min - 30, max + 30]; } },
          y: { range: function (u, min, max) { return [0, Math.max(1, max) * 1.1]; } }
        },
        // A bar per minute: a file or two in an hour still shows, where a line would be a hair.
        series: [{}, { stroke: color, fill: color, width: 0, points: { show: false }, paths: bars }]
      };
      new window.uPlot(options, [data.x, data.y], el);
    });
  }

  htmx.onLoad(drawSparks);

  // A poll that cannot reach the API shows a notice; the next one that does hides it.
  document.addEventListener("htmx:sendError", function () {
    document.body.classList.add("offline");
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (event.detail.successful) {
      document.body.classList.remove("offline");
    }
  });

  // Ctrl+Enter (Cmd+Enter) in the SQL box runs it.
  document.addEventListener("keydown", function (event) {
    var target = event.target;
    if ((event.ctrlKey || event.metaKey) && event.key === "Enter" && target && target.id === "sql") {
      event.preventDefault();
      htmx.trigger(target.form, "submit");
    }
  });
})();
