// weir dashboard: draws the overview's throughput table as a chart with the
// vendored uPlot. The table stays, for readers and for pages without script;
// the chart is drawn again after each live update.
(function () {
  function css(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function draw() {
    var table = document.querySelector("table.throughput");
    var box = document.getElementById("throughput-chart");
    if (!table || !box || typeof uPlot === "undefined") {
      return;
    }
    var rows = table.tBodies[0].rows;
    var xs = [], perMinute = [], pickup = [];
    for (var i = rows.length - 1; i >= 0; i--) {
      var d = rows[i].dataset;
      xs.push(Date.parse(d.start) / 1000);
      perMinute.push(Number(d.perMinute));
      pickup.push(d.pickupMs === "" ? null : Number(d.pickupMs));
    }
    var fg = css("--fg"), line = css("--line");
    var axis = function (scale, side) {
      return { scale: scale, side: side, stroke: fg, grid: { stroke: line, width: 1 }, ticks: { stroke: line, width: 1 } };
    };
    box.textContent = "";
    new uPlot({
      width: Math.max(300, Math.min(box.clientWidth, 1000)),
      height: 220,
      scales: { x: { time: true } },
      series: [
        {},
        { label: "completed per minute", scale: "n", stroke: css("--link"), width: 2 },
        { label: "mean pickup (ms)", scale: "ms", stroke: css("--danger"), width: 2, dash: [6, 4] }
      ],
      axes: [axis("x", 2), axis("n", 3), axis("ms", 1)]
    }, [xs, perMinute, pickup], box);
  }
  document.addEventListener("DOMContentLoaded", draw);
  document.addEventListener("htmx:afterSettle", draw);
})();
