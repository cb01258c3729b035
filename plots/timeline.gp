# The allocation timeline of one training step (memopt run --trace; memopt plot TRACE.csv [TRACE2.csv]).
# Run 1: allocated bytes stacked by category, reserved bytes as a line, its phases as the lower strip.
# Run 2 (optional): its allocated and reserved bytes as lines over run 1, its phases as the upper strip.
# x: the share of the step's allocations and frees, so two steps of different lengths line up.
# Defined by memopt plot: nruns, cfg1, dev1, key1, key2, ymax.
load scriptdir."/common.gp"
if (!exists("nruns")) nruns = 1
if (!exists("cfg1")) cfg1 = ""
if (!exists("dev1")) dev1 = ""
if (!exists("key1")) key1 = "run 1"
if (!exists("key2")) key2 = "run 2"
if (!exists("ymax")) ymax = 1
t1 = data("timeline_1.dat")
t2 = data("timeline_2.dat")
ph = data("timeline_phases.dat")
phase_rgb(p) = p == 1 ? 0x4e79a7 : p == 2 ? 0xf28e2b : p == 3 ? 0xe15759 : p == 4 ? 0x9c755f : 0xbab0ac
top = ymax * 1.22
strip(run) = ymax * (1.05 + 0.09 * (run - 1))
h = ymax * 0.035
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("timeline", fmt)
    set title sprintf("Allocation timeline of one training step: %s%s\n%s", cfg1, nruns == 2 ? " (red lines: ".key2.")" : "", dev1) noenhanced
    set xlabel "progress through the step (% of its allocations and frees)" offset 0,0.6
    set ylabel "GiB"
    set xrange [0:100]
    set yrange [0:top]
    set key below horizontal maxrows 3 noenhanced
    set label 11 (nruns == 2 ? "phases of ".key2 : "") at first 0.5, first strip(2) left front textcolor rgb "white" font ",9" noenhanced
    set label 12 "phases of ".(nruns == 2 ? key1 : "this step") at first 0.5, first strip(1) left front textcolor rgb "white" font ",9" noenhanced
    plot t1 using 1:(0):2 with filledcurves lc rgb c_param title "parameters", \
         '' using 1:2:3 with filledcurves lc rgb c_grad title "gradients", \
         '' using 1:3:4 with filledcurves lc rgb c_optim title "optimizer (Adam m, v)", \
         '' using 1:4:5 with filledcurves lc rgb c_master title "master weights", \
         '' using 1:5:6 with filledcurves lc rgb c_ws title "workspace (cuBLASLt, scratch)", \
         '' using 1:6:7 with filledcurves lc rgb c_act title "activations", \
         '' using 1:8 with lines lw 2 lc rgb "black" title "reserved".(nruns == 2 ? " (".key1.")" : ""), \
         (nruns == 2 ? t2 : t1) using 1:(nruns == 2 ? $7 : NaN) with lines lw 2.5 lc rgb "#d62728" title (nruns == 2 ? "allocated (".key2.")" : ""), \
         (nruns == 2 ? t2 : t1) using 1:(nruns == 2 ? $8 : NaN) with lines lw 2 dt 2 lc rgb "#d62728" title (nruns == 2 ? "reserved (".key2.")" : ""), \
         ph using (($2+$3)/2):(strip($1)):(($3-$2)/2):(h):(phase_rgb($4)) with boxxyerror fs solid 1.0 noborder lc rgb variable notitle, \
         NaN with boxes fs solid 1.0 lc rgb phase_rgb(1) title "phase: forward", \
         NaN with boxes fs solid 1.0 lc rgb phase_rgb(2) title "phase: backward", \
         NaN with boxes fs solid 1.0 lc rgb phase_rgb(3) title "phase: recompute"
    unset label 11
    unset label 12
    set output
}
