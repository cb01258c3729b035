# (c) What checkpointing costs against what it saves, each checkpointed configuration against the same
# configuration with ckpt none (docs/DESIGN.md: saving = 1 - bytes/bytes(none), recompute_overhead =
# step_ms/step_ms(none) - 1). Left: activation memory, the claim's own terms ("about 50% of activation
# memory for about 20% more time", the star), with the region where memopt claims calls it holding
# (saving in [40%, 60%], overhead at most 30%). Right: the peak (what a GPU must hold), no claim box.
# Points are numbered; the list says which is which; points that coincide share a label.
load scriptdir."/common.gp"
if (!exists("n_rec")) n_rec = 1
if (!exists("subtitle")) subtitle = ""
f = data("recompute_vs_saving.dat")
$claim << EOD
50 20
EOD
listfont = n_rec > 30 ? ",8" : ",9"
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("recompute_vs_saving", fmt)
    if (n_rec == 0) {
        set title "Checkpointing: time overhead against memory saving\n".subtitle
        eval(empty_panel("no checkpointed rows with a timed ckpt-none baseline in this CSV (times need a GPU or the cpu backend)"))
    } else {
        set multiplot title "Checkpointing: time overhead against memory saving, both vs. ckpt none\n".subtitle
        set origin 0, 0
        set size 0.37, 0.93
        set title "activation memory (the claim's terms)"
        set xlabel "activation saving (%)"
        set ylabel "time overhead (%)"
        set xrange [0:100]
        set yrange [*<-5:45<*] # overheads below -5% (timing noise on a loaded cpu) stay on the plot
        set offsets 0, 0, 3, 0
        set object 1 rect from first 40, first -5 to first 60, first 30 fc rgb "#e8f5e9" fs solid 1.0 noborder behind
        set label 1 "claim holds" at first 50, first 31.5 center textcolor rgb "#2e7d32" font ",9"
        set key below horizontal
        plot f using 3:4 with points pt 9 ps 1.4 lc rgb "#59a14f" title "configuration", \
             f using 3:4:6 with labels left offset 0.8,0 font ",9" noenhanced notitle, \
             $claim using 1:2 with points pt 3 ps 3 lw 3 lc rgb "#d62728" title "claimed: 50%, 20%"
        unset object 1
        unset label 1
        set origin 0.36, 0
        set size 0.36, 0.93
        set title "peak allocated memory (no claim)"
        set xlabel "peak saving (%)"
        plot f using 2:4 with points pt 7 ps 1.4 lc rgb "#1f77b4" title "configuration", \
             f using 2:4:7 with labels left offset 0.8,0 font ",9" noenhanced notitle
        reset; eval(style)
        set origin 0.745, 0
        set size 0.255, 0.93
        unset border; unset tics; unset grid; unset key
        set xrange [0:1]
        set yrange [n_rec + 0.5:0]
        set lmargin 0; set rmargin 1
        plot f using (0):5:(sprintf("%2d  %s", $5, strcol(1))) with labels left font listfont noenhanced
        unset multiplot
    }
    set output
}
